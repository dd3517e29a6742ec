"""The pipeline on Redis Streams: the daemon keeps producers, books and telemetry; workers and replicas are processes.

``RedisPipeline`` presents what the experiment, telemetry and injector read from the in-memory ``Pipeline`` —
queue depth, ledger, histograms, agents, the leader — from what it reads back from Redis every ``backend.poll``:
the results stream (one entry per effect the sink applied), the stream and its pending entries, the lease,
the heartbeats. Faults act on the processes: SIGKILL, SIGSTOP/SIGCONT, and a control hash per worker.

Redis may go away and come back empty (a restart without persistence): the monitor says so while it cannot
reach it (``backend_health``, for readiness), notices the restart (the run counter it wrote is gone, or the
server's ``run_id`` changed) and writes back from its own state what the processes read — every control hash,
the stage document, the consumer group, the fencing counter's floor, the counters — so no fault is cancelled
by a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from collections.abc import Set as AbstractSet
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
from chaosd.errors import ConfigError, FaultError
from chaosd.events import EventLog
from chaosd.pipeline import Pipeline
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.producer import Admission
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter, Worker
from chaosd.redact import redact_url

__all__ = ["RedisDispatch", "RedisPipeline"]

_DEFAULT_CONTROL = {"slow": "1.0", "drop": "0.0", "paused": "0", "partitioned": "0", "exit": ""}

_URL_VARIABLE = "CHAOSD_BACKEND__URL"  # how the local processes get a backend.url with a password
_RESULTS_BATCH = 50_000  # results read per poll; more left over means the books are behind
_SHUTDOWN_GRACE = 3.0  # seconds local processes get to exit on SIGTERM
_READY_TIMEOUT = 30.0  # seconds the local processes get to start before producers start anyway
_SNAPSHOT_EVERY = 1.0  # seconds between full reads of the stream (what the ledger calls held)
_MAX_REMOTE = 256  # workers started elsewhere that the daemon lists; more still serve, unlisted

# KEYS: fence. ARGV: the highest token seen. Tokens keep growing across a Redis that came back empty.
_FENCE_FLOOR = """
local seen = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < seen then
  redis.call('SET', KEYS[1], seen)
end
return 1
"""


def _where(url: str) -> str:
    """The server an URL names, without its credentials (a status line and readiness name it)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


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
        self.highest_token = 0  # the fencing counter is at least this (what a Redis that came back empty needs)
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
            self.highest_token = max(self.highest_token, self.token)
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


def _unavailable(action: str) -> FaultError:
    return FaultError(
        "action",
        f"{action} is not available on the redis backend: each worker process keeps its own copy of that stage",
        status=409,
    )


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
        self.feeders = self.make_producers(RedisProducer, self.stream, [p.agent for p in self.producers], measure_from)
        self.producers = list(self.feeders)
        self._runners = {p.agent.id: p.run for p in self.producers}
        self._roles = {r.id: "orchestrator" for r in self.dispatcher.replicas}
        if backend.local_workers:
            self._roles.update({w.agent.id: "worker" for w in self.workers})
        else:
            for w in self.workers:  # processes somebody else starts: alive once they beat
                w.agent.alive = False
                w.agent.refresh()
        self.procs: LocalProcesses | None = None
        self._client: Redis | None = None
        self._held: set[int] = set()  # task ids in the stream at the monitor's last look
        self._last_result = "0-0"
        self._early: list[tuple[str, dict[str, str]]] = []  # results read before their task's acceptance was booked
        self._last_delivered: str | None = None
        self._control: dict[str, dict[str, str]] = {}
        self._stage_doc = ""
        self._beating: set[str] = set()  # workers whose heartbeat key exists
        self._instances: dict[str, str] = {}  # the process behind each worker's last heartbeat
        self._killed: dict[str, str] = {}  # remote worker -> the instance asked to exit (dead until another beats)
        self._pending_by: dict[str, int] = {}  # the group's pending entries per consumer, at the last poll
        self._remote = 0  # workers adopted from their heartbeats
        self._unlisted: set[str] = set()  # beyond _MAX_REMOTE
        self._wake = asyncio.Event()  # a fault changed something the processes must hear of now
        self._polling = asyncio.Lock()  # one poll at a time: the control writes stay in order
        self._closed = False
        self.offset = 0.0
        self.results_read = 0
        # The backend's health: since when (clock time) and why Redis is unreachable; None while it answers.
        self._down_since: float | None = None
        self._down_reason = ""
        self._server_id: str | None = None  # INFO server's run_id: which Redis process answered last
        self._ask_server = True  # after an outage: ask again which Redis process answers
        self._stats_seen: dict[str, str] = {}  # the counters as last read, written back to a Redis that lost them
        self._stage_stats_seen: dict[str, str] = {}
        self.redis_restarts = 0  # Redis restarts noticed (a new run_id, or the daemon's keys gone)
        self.restored = 0  # times the daemon wrote its state back into Redis

    # --- agents are processes ----------------------------------------------------------------------

    def is_local(self, agent_id: str) -> bool:
        """A process this daemon started and supervises (its replicas, and its workers unless told otherwise)."""
        return agent_id in self._roles

    def kill(self, agent: Agent) -> None:
        if agent.kind == "worker" and not self.is_local(agent.id):
            self._kill_remote(agent)
            return
        if self.procs is None or not self.is_local(agent.id):
            super().kill(agent)
            return
        agent.alive = False
        agent.refresh()
        self.procs.kill(agent.id)
        self.events.record(self.elapsed(), "agent", agent=agent.id, state="dead", pid_killed=True)
        self.supervisor.died(agent)

    def _kill_remote(self, agent: Agent) -> None:
        """Ask the process behind the last heartbeat to exit now (its control hash); its own supervisor, not
        this daemon, starts it again, and the agent is alive once a heartbeat from another process arrives."""
        instance = self._instances.get(agent.id)
        if not agent.alive or instance is None:
            return
        self._killed[agent.id] = instance
        agent.alive = False
        agent.refresh()
        self.events.record(self.elapsed(), "agent", agent=agent.id, state="dead", exit_requested=instance)
        self._wake.set()

    def start_agent(self, agent: Agent) -> None:
        if self.procs is None or not self.is_local(agent.id):
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

    def _adopt(self, agent_id: str) -> None:
        """A worker started elsewhere beats: list it, and let faults reach it through its control hash."""
        agent = Agent(agent_id, "worker")
        worker = self.make_worker(agent)  # never run here: it carries the fault flags and what the heartbeats report
        self.workers.append(worker)
        self.agents[agent_id] = agent
        self.events.record(self.elapsed(), "agent", agent=agent_id, state="joined")

    def _observe_remote(self, agent: Agent, instance: str | None) -> None:
        """A worker this daemon does not run is alive while it beats (and is not the process asked to exit)."""
        killed = self._killed.get(agent.id)
        alive = instance is not None and instance != killed
        if alive == agent.alive:
            return
        agent.alive = alive
        agent.refresh()
        if alive:
            if killed is not None:
                del self._killed[agent.id]
                agent.restart_count += 1  # restarted by its own supervisor
            self.events.record(self.elapsed(), "agent", agent=agent.id, state="alive", instance=instance)
        else:
            self.events.record(self.elapsed(), "agent", agent=agent.id, state="dead", heartbeat="lost")

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
            self._signal_pause(agent_id)

    def _signal_pause(self, agent_id: str) -> None:
        """SIGSTOP a paused local process, SIGCONT a resumed one (no-op when it already matches)."""
        procs = self.procs
        agent = self.agents[agent_id]
        if procs is not None and agent.alive and agent.paused != procs.stopped(agent_id):
            procs.signal(agent_id, signal.SIGSTOP if agent.paused else signal.SIGCONT)

    # --- what faults act through (chaosd.faults.runtime.Runtime) -------------------------------------
    # The flags are the pipeline's (status, metrics and the catalogue read them); each change also reaches the
    # processes at once: a signal here, or a control write the monitor makes as soon as it is woken. The
    # monitor's periodic pass writes the same documents again if a write was lost (the safety net).

    def kill_agent(self, agent_id: str) -> None:
        agent = self.agents.get(agent_id)
        if agent is None:  # a replica started by hand can hold the lease without being an agent of ours
            raise FaultError("target", f"{agent_id} is not a process this daemon runs or has seen beat", status=409)
        self.kill(agent)

    def pause(self, ids: Collection[str], on: bool) -> None:
        super().pause(ids, on)
        for agent_id in ids:
            if self.is_local(agent_id):
                self._signal_pause(agent_id)  # SIGSTOP / SIGCONT now
        self._wake.set()  # remote workers: their control hash

    def partition(self, ids: Collection[str], on: bool) -> None:
        super().partition(ids, on)
        self._wake.set()

    def exhaust(self, ids: Collection[str], on: bool) -> None:
        super().exhaust(ids, on)
        self._wake.set()

    def slow(self, ids: Collection[str], factor: float) -> None:
        super().slow(ids, factor)
        self._wake.set()

    def drop_dispatches(self, ids: Collection[str], probability: float) -> None:
        super().drop_dispatches(ids, probability)
        self._wake.set()

    def held_tasks(self, ids: Collection[str]) -> int:
        """The consumers' pending entries: read and not yet acknowledged, so lost if the worker is cut off."""
        return sum(self._pending_by.get(agent_id, 0) for agent_id in ids)

    def remove_node(self, name: str, removed: bool) -> None:
        super().remove_node(name, removed)
        self._wake.set()  # the daemon reroutes, and the workers read the stage document

    def remove_edge(self, a: str, b: str, removed: bool) -> None:
        super().remove_edge(a, b, removed)
        self._wake.set()

    def hang(self, name: str, on: bool, timeout: float) -> None:
        super().hang(name, on, timeout)
        self._wake.set()

    def llm_down(self, name: str, on: bool) -> None:
        super().llm_down(name, on)
        self._wake.set()

    def jitter(self, name: str, seconds: float) -> None:
        super().jitter(name, seconds)
        self._wake.set()

    # Each worker process has its own memory store and MCP connection; the daemon's copies serve no task, and
    # breaking them would report damage nobody suffered. Refused before anything changes.

    def corrupt_memory(self, name: str, entries: int) -> list[int]:
        raise _unavailable("memory_corrupt")

    def corrupted(self, name: str) -> AbstractSet[int]:
        return frozenset()

    def mcp_drop(self, name: str, outage: float) -> None:
        raise _unavailable("mcp_disconnect")

    def mcp_restore(self, name: str) -> None:
        pass  # nothing was dropped

    def mcp_connected(self, name: str) -> bool:
        return True

    # --- what the stream holds ----------------------------------------------------------------------

    # A Redis restart without persistence loses the stream's tasks with no fault in play: walk every time.
    loss_needs_fault = False

    def holders(self) -> Iterator[Task]:
        """Tasks the stream held at the monitor's last look (waiting or pending), and those accepted since."""
        in_flight = self.ledger.in_flight
        for tid in self._held | self.stream.recent:
            task = in_flight.get(tid)
            if task is not None:
                yield task

    async def refresh(self) -> None:
        """One monitor pass now (tests and reports that need the books current); waits for one under way."""
        await self._poll(snapshot=True)

    # --- the backend's health -------------------------------------------------------------------------

    def backend_health(self) -> str | None:
        """Why the backend cannot serve now (Redis unreachable since the first poll that failed), or None."""
        since = self._down_since
        if since is None:
            return None
        where = _where(self.settings.backend.url)
        down = self.clock.now() - since
        return f"backend: Redis at {where} unreachable for {down:.1f} s ({self._down_reason})"

    def _unreachable(self, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:200]
        self._down_reason = reason
        self._ask_server = True  # once it answers: the same Redis process, or another one?
        if self._down_since is None:
            self._down_since = self.clock.now()
            self.events.record(self.elapsed(), "backend", state="unreachable", reason=reason)

    def _reachable(self) -> None:
        since = self._down_since
        if since is not None:
            self._down_since = None
            down = round(self.clock.now() - since, 3)
            self.events.record(self.elapsed(), "backend", state="reachable", down_s=down)

    @staticmethod
    async def _server(client: Redis) -> str:
        """Which Redis process answers: INFO server's run_id, new at every start of the server."""
        info = await client.info("server")
        return str(info.get("run_id", ""))

    def _came_back_empty(self) -> None:
        """The results stream starts again from its beginning, and the next full read of the (new) task stream
        finds the tasks that were lost with the old one."""
        self._last_result = "0-0"
        self._last_delivered = None

    async def _restore(self, client: Redis, *, lost: bool) -> bool:
        """Write back what the processes read from Redis, from the daemon's own state: every control hash and
        the stage document (the faults in force), the consumer group, the run counter (the marker that says
        Redis still holds this run) and the fencing counter's floor; when Redis lost its data, the counters
        too (added: what processes counted since the restart stays). One transaction: all of it or none."""
        keys = self.keys
        control = self._control_doc()
        stage_doc = self._stages_doc()
        pipe = client.pipeline(transaction=True)
        pipe.set(keys.run, self.stream.run_id, nx=True)
        pipe.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)  # BUSYGROUP if a worker was quicker
        pipe.eval(_FENCE_FLOOR, 1, keys.fence, self.lease.highest_token)
        for agent_id, doc in control.items():
            pipe.hset(keys.control(agent_id), items=[x for kv in doc.items() for x in kv])
        pipe.set(keys.stage_control, stage_doc)
        if lost:
            for name, value in self._stats_seen.items():
                pipe.hincrby(keys.stats, name, int(value))
            for name, value in self._stage_stats_seen.items():
                pipe.hincrby(keys.stage_stats, name, int(value))
        try:
            await pipe.execute(raise_on_error=False)
        except (RedisError, OSError) as exc:
            still_cancelled()
            self._control, self._stage_doc = {}, ""  # written again by the next pass
            self._unreachable(exc)
            return False
        self._control, self._stage_doc = control, stage_doc
        self.restored += 1
        active = sum(1 for doc in control.values() if doc != _DEFAULT_CONTROL)
        self.events.record(
            self.elapsed(), "backend", state="restored", lost_data=lost, controls=len(control), faulted=active
        )
        return True

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
                "exit": self._killed.get(a.id, ""),  # the process (instance) kill_agent asked to exit
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
        next_snapshot = self.clock.now()
        while not self._closed:
            await self._nap(poll)
            self._check_processes()
            now = self.clock.now()
            if self.dag_dirty:
                self._update_route(now)
            snapshot = now >= next_snapshot  # the whole stream is read about once a second
            if snapshot:
                next_snapshot = now + _SNAPSHOT_EVERY
            await self._poll(snapshot=snapshot)

    async def _nap(self, seconds: float) -> None:
        """Until the next poll is due, or sooner when a fault has something for the processes to hear."""
        wake = self._wake
        if not wake.is_set():
            # The loop's own deadline (the clock reads the same loop): a fault's set() ends the nap early.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await wake.wait()
        wake.clear()

    async def _poll(self, *, snapshot: bool) -> None:
        async with self._polling:
            await self._poll_once(snapshot=snapshot)

    async def _poll_once(self, *, snapshot: bool) -> None:
        client = self._client
        if client is None:
            return
        keys = self.keys
        queue = self.stream
        if self._ask_server:
            try:
                server = await self._server(client)
                restarted = self._server_id is not None and server != self._server_id
                lost = restarted and not await client.exists(keys.run)
            except (RedisError, OSError) as exc:  # down still, or loading its data
                still_cancelled()
                self._unreachable(exc)
                return
            self._server_id, self._ask_server = server, False
            if restarted:  # with persistence it kept its data; what the processes read is written anyway
                self.redis_restarts += 1
                self.events.record(self.elapsed(), "backend", state="restarted", lost_data=lost)
                if lost:
                    self._came_back_empty()
                if not await self._restore(client, lost=lost):
                    return
            self._reachable()  # ready again once what the processes read is back
        pipe = client.pipeline(transaction=False)
        pipe.get(keys.run)  # the marker: gone when Redis lost this run's data
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
        pipe.smembers(keys.members)
        workers = list(self.workers)
        for w in workers:
            pipe.hgetall(keys.heartbeat(w.agent.id))
        control = self._control_doc()
        changed = {a: doc for a, doc in control.items() if self._control.get(a) != doc}
        for agent_id, doc in changed.items():
            pipe.hset(keys.control(agent_id), items=[x for kv in doc.items() for x in kv])
        stage_doc = self._stages_doc()
        if stage_doc != self._stage_doc:
            pipe.set(keys.stage_control, stage_doc)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError) as exc:
            if snapshot:
                queue.recent |= recent
            still_cancelled()
            self._unreachable(exc)
            return
        marker, replies = replies[0], replies[1:]
        if isinstance(marker, Exception) or marker is None:
            if snapshot:
                queue.recent |= recent
            if isinstance(marker, Exception):  # loading its data, say: it answers, but cannot serve yet
                self._unreachable(marker)
                return
            # Redis came back empty (it restarted between two passes, or was flushed): nothing read in this
            # pass is booked; what the processes read is written back, and the next pass reads on.
            self.redis_restarts += 1
            self.events.record(self.elapsed(), "backend", state="restarted", lost_data=True)
            self._came_back_empty()
            with contextlib.suppress(RedisError, OSError):
                self._server_id = await self._server(client)  # the process that answers now, for the next outage
            if await self._restore(client, lost=True):
                self._reachable()
            return
        self._reachable()
        if snapshot:
            held, replies = replies[0], replies[1:]
        results = replies[0]
        drained = isinstance(results, list)
        if drained:
            for _, entries in results:
                self._books(entries)
                drained = len(entries) < _RESULTS_BATCH
        if self._early:
            self._books([])  # results that came back early, booked now if their tasks' answers have been
        if snapshot:
            if isinstance(held, list) and drained:
                self._held = {int(fields["i"]) for _, fields in held if "i" in fields}
            else:
                queue.recent |= recent  # no consistent picture this time: keep counting those as held
        xlen, pending, head_entry, groups, lease, stats, stage_stats, members = replies[1:9]
        beats = replies[9 : 9 + len(workers)]
        if not any(isinstance(r, Exception) for r in replies[9 + len(workers) :]):
            self._control.update(changed)
            self._stage_doc = stage_doc
        n_pending = 0
        if isinstance(pending, dict):
            n_pending = pending.get("pending", 0)
            self._pending_by = {str(c["name"]): int(c["pending"]) for c in pending.get("consumers") or ()}
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
            self._stats_seen = stats
            self.lease.observe(lease if isinstance(lease, str) else None, stats)
            self.ledger.deduplicated = int(stats.get("deduplicated", 0))
            for w in workers:
                w.dropped = int(stats.get(f"dropped:{w.agent.id}", 0))
        if isinstance(stage_stats, dict):
            self._stage_stats_seen = stage_stats
            for key, value in stage_stats.items():
                name, _, counter = key.rpartition(":")
                stage = self.stages.get(name)
                if stage is not None and counter in ("degraded", "successes", "fallback_served"):
                    setattr(stage, counter, int(value))
        self._heartbeats(workers, beats)
        if isinstance(members, set | list):
            self._join(members)

    def _heartbeats(self, workers: list[Worker], beats: list[Any]) -> None:
        busy = 0
        beating = set()
        for w, beat in zip(workers, beats, strict=True):
            agent = w.agent
            if isinstance(beat, Exception):
                continue  # no news: keep what the last poll said
            instance = beat.get("instance") if beat else None
            if beat:
                beating.add(agent.id)
                self._instances[agent.id] = instance or ""
            if agent.kind == "worker" and not self.is_local(agent.id):
                self._observe_remote(agent, instance)
            task_id = beat.get("busy", "") if beat else ""
            if task_id and agent.alive and not agent.paused:
                busy += 1
                held_task = self.ledger.in_flight.get(int(task_id))
                w.current = held_task if held_task is not None else Task(int(task_id), 0.0, False)
            else:
                w.current = None
        self._beating = beating
        self.busy.busy = busy

    def _join(self, members: Collection[str]) -> None:
        """Workers that beat without being listed yet (started on another host, or by hand) become agents."""
        for agent_id in sorted(set(members) - self.agents.keys() - self._unlisted):
            if self._remote >= _MAX_REMOTE:
                self._unlisted.add(agent_id)  # it serves, and its results count; it is not an agent here
                self.events.record(self.elapsed(), "backend", state="unlisted", agent=agent_id, limit=_MAX_REMOTE)
                continue
            self._adopt(agent_id)
            self._remote += 1

    def _books(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        """Each result is an effect the sink applied: the ledger, the histograms and the busy time hear of it."""
        ledger = self.ledger
        in_flight = ledger.in_flight
        submitting = self.stream.submitting
        offset = self.offset
        agents = self.agents
        if entries:
            self._last_result = entries[-1][0]
        early, self._early = self._early, []
        for entry, f in (*early, *entries):
            tid = int(f["i"])
            task = in_flight.get(tid)
            if task is None and tid in submitting:
                # The worker was quicker than this loop: its result came back before the answer to the task's
                # submission was booked. Booked at a later read, once accepted; not taken for a second outcome.
                self._early.append((entry, f))
                continue
            self.results_read += 1
            accepted, started, ended = float(f["a"]), float(f["s"]), float(f["e"])
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
            url = redact_url(self.settings.backend.url)  # the server, never its password
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

    def _children_settings(self, path: Path) -> Callable[[], None]:
        """The settings file the local processes read, without the Redis password: a URL with credentials is
        written redacted, and the real one reaches the processes only as their environment variable
        CHAOSD_BACKEND__URL (which beats a file, as for every process), set here in the daemon's environment
        until the run ends (call what this returns) so that every spawner started meanwhile inherits it.
        The file stays in the run's private directory either way (mode 0700, removed at the end)."""
        data = self.settings.model_dump(mode="json", exclude={"api", "daemon", "storage"}, by_alias=True)
        url = self.settings.backend.url
        data["backend"]["url"] = redact_url(url)
        path.write_text(json.dumps(data))
        if data["backend"]["url"] == url:
            return lambda: None
        before = os.environ.get(_URL_VARIABLE)
        os.environ[_URL_VARIABLE] = url

        def restore() -> None:
            if before is None:
                os.environ.pop(_URL_VARIABLE, None)
            else:
                os.environ[_URL_VARIABLE] = before

        return restore

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Pipeline]:
        """Connect, start the local processes and the producers; stop them all after the body."""
        client = Redis.from_url(
            self.settings.backend.url, decode_responses=True, socket_connect_timeout=1.0, socket_timeout=5.0
        )
        tmp = tempfile.TemporaryDirectory(prefix="chaosd-redis-")
        forget_url: Callable[[], None] = lambda: None  # noqa: E731
        try:
            await self._prepare(client)
            self._client = client
            path = Path(tmp.name) / "settings.json"
            forget_url = self._children_settings(path)
            self.procs = LocalProcesses(path, Path(tmp.name), self.clock)
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
            forget_url()
