"""The pipeline on Redis Streams: the daemon keeps producers, books and telemetry; workers and replicas are processes.

``RedisPipeline`` presents what the experiment, telemetry and injector read from the in-memory ``Pipeline`` —
queue depth, ledger, histograms, agents, the leader — from what it reads back from Redis every ``backend.poll``:
the results stream (one entry per effect the sink applied), the stream and its pending entries, the lease,
the heartbeats. Faults act on the processes: SIGKILL, SIGSTOP/SIGCONT, and a control hash per worker.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from chaosd.backends.redis_clock import server_offset
from chaosd.backends.redis_procs import LocalProcesses
from chaosd.backends.redis_queue import RedisProducer, RedisQueue, still_cancelled
from chaosd.backends.redis_scripts import Keys
from chaosd.clock import Clock
from chaosd.config import Settings
from chaosd.errors import ConfigError
from chaosd.events import EventLog
from chaosd.pipeline import Pipeline
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.producer import Admission
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter
from chaosd.rng import Streams

__all__ = ["RedisDispatch", "RedisPipeline"]

_RESULTS_BATCH = 50_000  # results read per poll; more left over means the books are behind
_SHUTDOWN_GRACE = 3.0  # seconds local processes get to exit on SIGTERM
_READY_TIMEOUT = 30.0  # seconds the local processes get to start before producers start anyway


class _RemoteBusy(BusyMeter):
    """Busy workers (from heartbeats) and the service time they reported (utilisation's numerator)."""

    def area_at(self, t: float) -> float:
        return self.area


class RedisDispatch(Dispatcher):
    """The lease as the daemon reads it: who holds it, its fencing token, and the leader's counters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holder: str | None = None  # agent id in the lease key
        self.identity: str | None = None  # agent id / pid
        self.token = 0
        self._first_token: int | None = None
        self.refused_writes = 0
        self._alive: dict[str, Agent] = {r.id: r for r in self.replicas}

    @property
    def leader_id(self) -> str | None:
        holder = self.holder
        if holder is None:
            return None
        agent = self._alive.get(holder)
        return holder if agent is None or agent.alive else None

    def observe(self, lease: str | None, stats: dict[str, str]) -> None:
        if lease:
            identity, _, token = lease.rpartition(":")
            self.identity = identity
            self.holder = identity.partition("/")[0]
            self.token = int(token) if token.isdigit() else 0
            if self._first_token is None:
                self._first_token = self.token
            # Every token after the first one the daemon saw is an election.
            self.elections = max(self.elections, self.token - self._first_token)
        else:
            self.holder = self.identity = None
        self.lease_expired = int(stats.get("lease_expired", 0))
        self.redispatched = int(stats.get("redispatched", 0))
        self.refused_writes = int(stats.get("refused_writes", 0))

    def replica_died(self, replica: Agent) -> None:
        pass  # its lease runs out unrenewed in Redis; a standby process takes it

    def tick(self, now: float) -> None:
        pass  # the replicas beat in their own processes

    def held(self) -> Iterator[Task]:
        return iter(())  # the stream's pending entries answer for dispatched tasks (RedisPipeline.holders)


class RedisPipeline(Pipeline):
    """The runtime with its ingress queue, sink, lease and workers in Redis and local processes."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        *,
        admission: Admission | None = None,
        measure_from: float = 0.0,
        events: EventLog | None = None,
    ) -> None:
        super().__init__(settings, clock, admission=admission, measure_from=measure_from, events=events)
        backend = settings.backend
        self.keys = Keys.of(backend)
        self.stream = RedisQueue(
            settings.queue.capacity, settings.queue.when_full, clock, self.ledger, self.keys, backend.poll
        )
        self.queue = self.stream
        self.busy = _RemoteBusy(self.t0)
        self.lease = RedisDispatch(
            settings.orchestrator, self.dispatcher.replicas, self.stream, clock, self.events, self.t0
        )
        self.dispatcher = self.lease
        streams = Streams(settings.seed)
        ids = itertools.count(1)
        load = settings.load
        n = load.producers
        self.feeders = [
            RedisProducer(
                share=1.0 / n,
                shape=self.shape,
                arrival=load.arrival,
                burst_size=load.burst_size,
                rng=streams.stream(f"arrivals:{i}"),
                agent=self.agents[f"producer-{i}"],
                queue=self.stream,
                ledger=self.ledger,
                admission=self.admission,
                surge=self.surge,
                clock=clock,
                ids=ids,
                t0=self.t0,
                measure_from=self.t0 + measure_from,
                phase=i / n,
            )
            for i in range(n)
        ]
        self.producers = list(self.feeders)
        self._runners = {p.agent.id: p.run for p in self.producers}
        self._roles = {r.id: "orchestrator" for r in self.dispatcher.replicas}
        if backend.local_workers:
            self._roles.update({w.agent.id: "worker" for w in self.workers})
        self.procs: LocalProcesses | None = None
        self._client: Redis | None = None
        self._held: set[int] = set()  # task ids in the stream at the monitor's last look
        self._last_result = "0-0"
        self._last_delivered: str | None = None
        self._control: dict[str, dict[str, str]] = {}
        self._stage_doc = ""
        self._beating: set[str] = set()  # workers whose heartbeat key exists
        self._closed = False
        self.offset = 0.0
        self.results_read = 0

    # --- agents are processes ----------------------------------------------------------------------

    def kill(self, agent: Agent) -> None:
        if self.procs is None or agent.id not in self._roles:
            super().kill(agent)
            return
        agent.alive = False
        agent.refresh()
        self.procs.kill(agent.id)
        self.events.record(self.elapsed(), "agent", agent=agent.id, state="dead", pid_killed=True)
        self.supervisor.died(agent)

    def start_agent(self, agent: Agent) -> None:
        if self.procs is None or agent.id not in self._roles:
            super().start_agent(agent)
            return
        agent.alive = True
        agent.gave_up = False
        agent.refresh()
        pid = self.procs.start(agent.id, self._roles[agent.id])
        self.events.record(self.elapsed(), "agent", agent=agent.id, state="alive", pid=pid)

    def pid(self, agent_id: str) -> int | None:
        """The OS process behind a local worker or replica (None when not running)."""
        return self.procs.pid(agent_id) if self.procs is not None else None

    def _check_processes(self) -> None:
        procs = self.procs
        if procs is None:
            return
        for agent_id in procs.exited():
            agent = self.agents[agent_id]
            if agent.alive:  # died by itself (or by a signal from outside): the supervisor's to restart
                agent.alive = False
                agent.refresh()
                self.events.record(self.elapsed(), "agent", agent=agent_id, state="dead")
                self.supervisor.died(agent)
        for agent_id in self._roles:
            agent = self.agents[agent_id]
            if agent.alive and agent.paused != procs.stopped(agent_id):
                procs.signal(agent_id, signal.SIGSTOP if agent.paused else signal.SIGCONT)

    # --- what the stream holds ----------------------------------------------------------------------

    def holders(self) -> Iterator[Task]:
        """Tasks the stream held at the monitor's last look (waiting or pending), and those accepted since."""
        in_flight = self.ledger.in_flight
        for tid in self._held | self.stream.recent:
            task = in_flight.get(tid)
            if task is not None:
                yield task

    async def refresh(self) -> None:
        """One monitor pass now (tests and reports that need the books current)."""
        await self._poll(snapshot=True)

    # --- the monitor --------------------------------------------------------------------------------

    def _control_doc(self) -> dict[str, dict[str, str]]:
        docs = {}
        local = self._roles
        for w in self.workers:
            a = w.agent
            paused = a.exhausted or (a.paused and a.id not in local)  # local ones get SIGSTOP instead
            docs[a.id] = {
                "slow": repr(a.slow),
                "drop": repr(w.drop_probability),
                "paused": "1" if paused else "0",
                "partitioned": "1" if a.partitioned else "0",
            }
        return docs

    def _stages_doc(self) -> str:
        stages = {
            name: {
                "removed": s.removed,
                "hang": s.hang,
                "hang_timeout": s.hang_timeout,
                "llm_down": s.llm_down,
                "jitter": s.jitter,
            }
            for name, s in self.stages.items()
        }
        edges = sorted([a, b] for a, b in self.dag.removed_edges)
        return json.dumps({"stages": stages, "removed_edges": edges}, sort_keys=True)

    async def _monitor(self) -> None:
        poll = self.settings.backend.poll
        every = max(1, round(1.0 / poll))  # the whole stream is read about once a second
        for k in itertools.count():
            if self._closed:
                return
            await self.clock.sleep(poll)
            self._check_processes()
            if self.dag_dirty:
                self._update_route(self.clock.now())
            await self._poll(snapshot=k % every == 0)

    async def _poll(self, *, snapshot: bool) -> None:
        client = self._client
        if client is None:
            return
        keys = self.keys
        queue = self.stream
        pipe = client.pipeline(transaction=False)
        recent = queue.recent
        if snapshot:
            queue.recent = set()
            pipe.xrange(keys.stream)
        pipe.xread({keys.results: self._last_result}, count=_RESULTS_BATCH)
        pipe.xlen(keys.stream)
        pipe.xpending(keys.stream, keys.group)
        head = f"({self._last_delivered}" if self._last_delivered else "-"
        pipe.xrange(keys.stream, min=head, count=1)
        pipe.xinfo_groups(keys.stream)
        pipe.get(keys.lease)
        pipe.hgetall(keys.stats)
        pipe.hgetall(keys.stage_stats)
        workers = [w.agent.id for w in self.workers]
        for agent_id in workers:
            pipe.hgetall(keys.heartbeat(agent_id))
        control = self._control_doc()
        changed = {a: doc for a, doc in control.items() if self._control.get(a) != doc}
        for agent_id, doc in changed.items():
            pipe.hset(keys.control(agent_id), items=[x for kv in doc.items() for x in kv])
        stage_doc = self._stages_doc()
        if stage_doc != self._stage_doc:
            pipe.set(keys.stage_control, stage_doc)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError):
            if snapshot:
                queue.recent |= recent
            still_cancelled()
            return
        if snapshot:
            held, replies = replies[0], replies[1:]
        results = replies[0]
        drained = isinstance(results, list)
        if drained:
            for _, entries in results:
                self._books(entries)
                drained = len(entries) < _RESULTS_BATCH
        if snapshot:
            if isinstance(held, list) and drained:
                self._held = {int(fields["i"]) for _, fields in held if "i" in fields}
            else:
                queue.recent |= recent  # no consistent picture this time: keep counting those as held
        xlen, pending, head_entry, groups, lease, stats, stage_stats = replies[1:8]
        beats = replies[8 : 8 + len(workers)]
        if not any(isinstance(r, Exception) for r in replies[8 + len(workers) :]):
            self._control.update(changed)
            self._stage_doc = stage_doc
        n_pending = pending.get("pending", 0) if isinstance(pending, dict) else 0
        head_age = 0.0
        if isinstance(head_entry, list) and head_entry:
            head_ms = int(str(head_entry[0][0]).partition("-")[0])
            head_age = max(0.0, self.clock.now() + self.offset - head_ms / 1000)
        if isinstance(groups, list):
            for group in groups:
                if group.get("name") == keys.group:
                    self._last_delivered = str(group.get("last-delivered-id"))
        else:
            self._last_delivered = None
        if isinstance(xlen, int):
            queue.observe(xlen - n_pending, n_pending, head_age)
        if isinstance(stats, dict):
            self.lease.observe(lease if isinstance(lease, str) else None, stats)
            self.ledger.deduplicated = int(stats.get("deduplicated", 0))
            for w in self.workers:
                w.dropped = int(stats.get(f"dropped:{w.agent.id}", 0))
        if isinstance(stage_stats, dict):
            for key, value in stage_stats.items():
                name, _, counter = key.rpartition(":")
                stage = self.stages.get(name)
                if stage is not None and counter in ("degraded", "successes", "fallback_served"):
                    setattr(stage, counter, int(value))
        busy = 0
        self._beating = {w.agent.id for w, beat in zip(self.workers, beats, strict=True) if beat}
        for w, beat in zip(self.workers, beats, strict=True):
            task_id = beat.get("busy", "") if isinstance(beat, dict) else ""
            if task_id and w.agent.alive and not w.agent.paused:
                busy += 1
                held_task = self.ledger.in_flight.get(int(task_id))
                w.current = held_task if held_task is not None else Task(int(task_id), 0.0, False)
            else:
                w.current = None
        self.busy.busy = busy

    def _books(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        """Each result is an effect the sink applied: the ledger, the histograms and the busy time hear of it."""
        ledger = self.ledger
        in_flight = ledger.in_flight
        offset = self.offset
        agents = self.agents
        for entry, f in entries:
            self._last_result = entry
            self.results_read += 1
            tid = int(f["i"])
            accepted, started, ended = float(f["a"]), float(f["s"]), float(f["e"])
            task = in_flight.get(tid)
            first = task is not None
            if task is None:
                task = Task(tid, accepted - offset, f.get("m") == "1")
                task.accepted_at = accepted - offset
            if f.get("n") == "0" and first:
                self.wait.add(started - accepted)
            self.busy.area += ended - started
            reason = f.get("o", "")
            if reason:
                ledger.fail(task, reason)
            else:
                if first:
                    self.sojourn.add(ended - accepted)
                ledger.complete(task, ended - offset, f.get("d") == "1")
            worker = agents.get(f.get("w", ""))
            if worker is not None:
                worker.served += 1

    # --- lifecycle ----------------------------------------------------------------------------------

    async def _prepare(self, client: Redis) -> None:
        keys = self.keys
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            url = self.settings.backend.url
            raise ConfigError([("configuration", "backend.url", f"cannot reach Redis at {url}: {exc}")]) from None
        self.offset = await server_offset(client, self.clock)
        await client.delete(*keys.wiped_at_start(), *(keys.control(w.agent.id) for w in self.workers))
        await client.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)
        run_id = str(await client.incr(keys.run))
        self.stream.connect(client, self.offset, run_id)
        self.events.record(self.elapsed(), "backend", backend="redis", run=run_id)

    async def _ready(self) -> None:
        """Until every local worker beats and a replica holds the lease (a process takes a second or two to
        start): producers that began before would only build a backlog nobody serves."""
        deadline = self.clock.now() + _READY_TIMEOUT
        local = [w for w in self.workers if w.agent.id in self._roles]
        while self.clock.now() < deadline:
            await self._poll(snapshot=False)
            if self.lease.holder is not None and all(w.agent.id in self._beating for w in local):
                self.events.record(self.elapsed(), "backend", state="ready")
                return
            await self.clock.sleep(self.settings.backend.poll)
        self.events.record(self.elapsed(), "backend", state="not_ready")

    def _restart_clock(self) -> None:
        """Time starts when the processes are ready: the seconds they took to start are nobody's load, and
        telemetry ticks, warm-up and load phases count from here, as they count from the start in memory."""
        shift = self.clock.now() - self.t0
        self.t0 += shift
        for producer in self.feeders:
            producer.restart_clock(shift)
        self.stream.reset_area()
        self.busy = _RemoteBusy(self.t0)

    def _children_settings(self, path: Path) -> None:
        data = self.settings.model_dump(mode="json", exclude={"api", "daemon", "storage"}, by_alias=True)
        path.write_text(json.dumps(data))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Pipeline]:
        """Connect, start the local processes and the producers; stop them all after the body."""
        client = Redis.from_url(
            self.settings.backend.url, decode_responses=True, socket_connect_timeout=1.0, socket_timeout=5.0
        )
        tmp = tempfile.TemporaryDirectory(prefix="chaosd-redis-")
        try:
            await self._prepare(client)
            self._client = client
            path = Path(tmp.name) / "settings.json"
            self._children_settings(path)
            self.procs = LocalProcesses(path, Path(tmp.name))
            for agent_id, role in self._roles.items():
                self.procs.start(agent_id, role)
            await self._ready()
            self._restart_clock()
            async with asyncio.TaskGroup() as group:
                self._group = group
                background = [
                    group.create_task(self.stream.flush(), name="redis-admission"),
                    group.create_task(self._monitor(), name="redis-monitor"),
                ]
                for agent_id, runner in self._runners.items():
                    self.agents[agent_id].task = group.create_task(runner(), name=agent_id)
                try:
                    yield self
                finally:
                    self._group = None
                    self.supervisor.close()
                    self.stream.close()
                    self._closed = True
                    for task in background:
                        task.cancel()
                    for producer in self.producers:
                        if producer.agent.task is not None:
                            producer.agent.task.cancel()
        finally:
            self._client = None
            if self.procs is not None:
                self.procs.close(_SHUTDOWN_GRACE)
            await client.aclose()
            tmp.cleanup()
