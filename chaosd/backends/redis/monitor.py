"""The monitor: every ``backend.poll`` one pipeline to Redis reads the results, the stream, the lease and the
heartbeats back into the daemon's books, and writes the control documents that changed.

Redis may go away and come back empty (a restart without persistence): the monitor says so while it cannot
reach it (``Health``), notices the restart (the run counter it wrote is gone, or the server's ``run_id``
changed) and writes back from the daemon's own state what the processes read — every control hash, the stage
document, the consumer group, the fencing counter's floor, the counters — so no fault is cancelled by a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterator, Set
from typing import Protocol

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline as Commands
from redis.exceptions import RedisError

from chaosd.backends.redis.books import Books, RemoteBusy
from chaosd.backends.redis.control import DEFAULT_CONTROL, Controls, flat
from chaosd.backends.redis.dispatch import RedisDispatch
from chaosd.backends.redis.health import Health, server_id
from chaosd.backends.redis.queue import RedisQueue, still_cancelled
from chaosd.backends.redis.replies import Heartbeat, PollReply, StageTotals
from chaosd.backends.redis.scripts import Keys
from chaosd.backends.redis.stalls import Stalls
from chaosd.pipeline import Pipeline
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import Worker
from chaosd.views import BreakerState

__all__ = ["Monitor", "Processes"]

_RESULTS_BATCH = 50_000  # results read per poll; more left over means the books are behind
_SNAPSHOT_EVERY = 1.0  # seconds between full reads of the stream (what the ledger calls held)
_MAX_REMOTE = 256  # workers started elsewhere that the daemon lists; more still serve, unlisted
_WORST: dict[BreakerState, int] = {"closed": 0, "half_open": 1, "open": 2}  # the daemon shows the worst worker's

# KEYS: fence. ARGV: the highest token seen. Tokens keep growing across a Redis that came back empty.
_FENCE_FLOOR = """
local seen = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < seen then
  redis.call('SET', KEYS[1], seen)
end
return 1
"""


class Processes(Protocol):
    """The worker and replica processes as the monitor reports on them (the runtime runs them)."""

    def check_processes(self) -> None:
        """Local processes that exited by themselves are dead (the supervisor's to restart); paused ones stopped."""

    def is_local(self, agent_id: str) -> bool:
        """A process this daemon started and supervises."""

    def pid(self, agent_id: str) -> int | None:
        """The OS process behind a local agent (None once it has exited)."""

    def observe_remote(self, agent: Agent, instance: str | None) -> None:
        """A worker this daemon does not run beat as ``instance`` (None: its heartbeat is gone)."""

    def adopt(self, agent_id: str) -> None:
        """A worker started elsewhere beats: list it as an agent."""


class Monitor:
    """Reads Redis into the pipeline's books and writes the faults in force to it; one pass at a time."""

    def __init__(
        self,
        pipeline: Pipeline,
        runtime: Processes,
        keys: Keys,
        stream: RedisQueue,
        lease: RedisDispatch,
        busy: RemoteBusy,
        controls: Controls,
        health: Health,
    ) -> None:
        self._p = pipeline
        self._rt = runtime
        self._keys = keys
        self._stream = stream
        self._lease = lease
        self._busy = busy
        self._controls = controls
        self._health = health
        self.books = Books(pipeline.ledger, stream, busy, pipeline.wait, pipeline.sojourn, pipeline.agents)
        self.stalls = Stalls(pipeline, runtime)
        self.client: Redis | None = None
        self.closed = False
        self._held: set[int] = set()  # task ids in the stream at the monitor's last look
        self._last_delivered: str | None = None
        self.beating: set[str] = set()  # workers whose heartbeat key exists
        self.instances: dict[str, str] = {}  # the process behind each worker's last heartbeat
        self.pending_by: dict[str, int] = {}  # the group's pending entries per consumer, at the last poll
        self._remote = 0  # workers adopted from their heartbeats
        self._unlisted: set[str] = set()  # beyond _MAX_REMOTE
        self._reading: Set[int] = frozenset()  # accepted before a snapshot pass that has not been read yet
        self._polling = asyncio.Lock()  # one poll at a time: the control writes stay in order
        self._stats_seen: dict[str, str] = {}  # the counters as last read, written back to a Redis that lost them
        self._stage_stats_seen: dict[str, str] = {}
        self._latency_seen: dict[str, tuple[dict[int, int], int]] = {}  # per stage: buckets and ns booked so far
        # Per worker: its stages whose breaker is not closed, and until when (daemon clock) an open one stays so.
        self.breakers: dict[str, dict[str, tuple[BreakerState, float]]] = {}
        self.redis_restarts = 0  # Redis restarts noticed (a new run_id, or the daemon's keys gone)
        self.restored = 0  # times the daemon wrote its state back into Redis

    def holders(self) -> Iterator[Task]:
        """Tasks the stream held at the last look (waiting or pending), and those accepted since."""
        in_flight = self._p.ledger.in_flight
        for tid in self._held | self._reading | self._stream.recent:
            task = in_flight.get(tid)
            if task is not None:
                yield task

    async def run(self) -> None:
        p = self._p
        poll = p.settings.backend.poll
        next_snapshot = p.clock.now()
        while not self.closed:
            await self._controls.nap(poll)
            self.stalls.exited()
            self._rt.check_processes()
            now = p.clock.now()
            if p.dag_dirty:
                p.update_route(now)
            snapshot = now >= next_snapshot  # the whole stream is read about once a second
            if snapshot:
                next_snapshot = now + _SNAPSHOT_EVERY
            await self.poll(snapshot=snapshot)

    async def poll(self, *, snapshot: bool) -> None:
        async with self._polling:
            try:
                await self._poll_once(snapshot=snapshot)
            finally:
                self._reading = frozenset()  # the pass has put them in _held or back in recent

    def _came_back_empty(self) -> None:
        """The results stream starts again from its beginning, and the next full read of the (new) task stream
        finds the tasks that were lost with the old one."""
        self.books.rewind()
        self._last_delivered = None

    def _restarted(self) -> None:
        self.redis_restarts += 1
        self._p.events.record(self._p.elapsed(), "backend", state="restarted", lost_data=True)
        self._came_back_empty()

    async def _ask_server(self, client: Redis) -> bool:
        """After an outage: the same Redis process, or another one (then write back what the processes read)?
        False when this pass cannot go on."""
        health = self._health
        try:
            server = await server_id(client)
            restarted = health.server is not None and server != health.server
            lost = restarted and not await client.exists(self._keys.run)
        except (RedisError, OSError) as exc:  # down still, or loading its data
            still_cancelled()
            health.unreachable(exc)
            return False
        health.server, health.ask_server = server, False
        if restarted:  # with persistence it kept its data; what the processes read is written anyway
            self.redis_restarts += 1
            self._p.events.record(self._p.elapsed(), "backend", state="restarted", lost_data=lost)
            if lost:
                self._came_back_empty()
            if not await self._restore(client, lost=lost):
                return False
        health.reachable()  # ready again once what the processes read is back
        return True

    async def _poll_once(self, *, snapshot: bool) -> None:
        client = self.client
        if client is None:
            return
        queue = self._stream
        health = self._health
        controls = self._controls
        if health.ask_server and not await self._ask_server(client):
            return
        pipe = client.pipeline(transaction=False)
        recent = queue.recent
        if snapshot:
            queue.recent = set()
            self._reading = recent  # held still while the pass is out: a report read meanwhile counts them
        workers = list(self._p.workers)
        changed, stage_doc = self._ask(pipe, workers, snapshot=snapshot)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError) as exc:
            if snapshot:
                queue.recent |= recent
            still_cancelled()
            health.unreachable(exc)
            return
        except asyncio.CancelledError:
            if snapshot:
                queue.recent |= recent  # a pass cut short at the run's end: what was accepted is still held
            raise
        marker = replies[0]
        if isinstance(marker, Exception) or marker is None:
            if snapshot:
                queue.recent |= recent
            await self._no_marker(client, marker)
            return
        health.reachable()
        reply = PollReply.from_replies(replies[1:], snapshot=snapshot, workers=len(workers), batch=_RESULTS_BATCH)
        if reply.written:
            controls.written.update(changed)
            controls.stages_written = stage_doc
        self._read(reply, workers, snapshot=snapshot, recent=recent)

    def _ask(self, pipe: Commands, workers: list[Worker], *, snapshot: bool) -> tuple[dict[str, dict[str, str]], str]:
        """One pass's commands, in the order ``PollReply`` reads their replies: the run marker, the stream (all of
        it for a snapshot), the results, the lease, the counters, the members and heartbeats; then the control
        documents that changed since last written (returned, with the stage document, to be marked written)."""
        keys = self._keys
        controls = self._controls
        pipe.get(keys.run)  # the marker: gone when Redis lost this run's data
        if snapshot:
            pipe.xrange(keys.stream)
        pipe.xread({keys.results: self.books.last}, count=_RESULTS_BATCH)
        pipe.xlen(keys.stream)
        pipe.xpending(keys.stream, keys.group)
        head = f"({self._last_delivered}" if self._last_delivered else "-"
        pipe.xrange(keys.stream, min=head, count=1)
        pipe.xinfo_groups(keys.stream)
        pipe.get(keys.lease)
        pipe.hgetall(keys.stats)
        pipe.hgetall(keys.stage_stats)
        pipe.smembers(keys.members)
        for w in workers:
            pipe.hgetall(keys.heartbeat(w.agent.id))
        control = controls.control_docs()
        changed = {a: doc for a, doc in control.items() if controls.written.get(a) != doc}
        for agent_id, doc in changed.items():
            pipe.hset(keys.control(agent_id), items=flat(doc))
        stage_doc = controls.stages_doc()
        if stage_doc != controls.stages_written:
            pipe.set(keys.stage_control, stage_doc)
        return changed, stage_doc

    async def _no_marker(self, client: Redis, marker: object) -> None:
        """The run marker did not come back: Redis cannot serve yet (an error), or it lost this run's data."""
        health = self._health
        if isinstance(marker, Exception):  # loading its data, say: it answers, but cannot serve yet
            health.unreachable(marker)
            return
        # Redis came back empty (it restarted between two passes, or was flushed): nothing read in this
        # pass is booked; what the processes read is written back, and the next pass reads on.
        self._restarted()
        with contextlib.suppress(RedisError, OSError):
            health.server = await server_id(client)  # the process that answers now, for the next outage
        if await self._restore(client, lost=True):
            health.reachable()

    def _read(self, reply: PollReply, workers: list[Worker], *, snapshot: bool, recent: set[int]) -> None:
        p = self._p
        queue = self._stream
        for batch in reply.results or ():
            self.books.book(batch)
        if self.books.behind:
            self.books.book(())  # results that came back early, booked now if their tasks' answers have been
        if snapshot:
            if reply.held is not None and reply.drained:
                self._held = set(reply.held)
            else:
                queue.recent |= recent  # no consistent picture this time: keep counting those as held
        n_pending = 0
        if reply.pending is not None:
            n_pending = reply.pending.count
            self.pending_by = reply.pending.by_consumer
        head_age = 0.0
        if reply.head_ms is not None:
            head_age = max(0.0, p.clock.now() + queue.offset - reply.head_ms / 1000)
        if reply.groups is None:
            self._last_delivered = None
        elif self._keys.group in reply.groups:
            self._last_delivered = reply.groups[self._keys.group]
        if reply.length is not None:
            queue.observe(reply.length - n_pending, n_pending, head_age)
        stats = reply.stats
        if stats is not None:
            self._stats_seen = stats.raw
            self._lease.observe(reply.lease, stats)
            p.ledger.deduplicated = stats.deduplicated
            for w in workers:
                w.dropped = stats.dropped(w.agent.id)
        if reply.stage_stats is not None:
            self._stage_stats_seen = reply.stage_stats
            for name, totals in reply.stage_totals.items():
                stage = p.stages.get(name)
                if stage is not None:
                    self._mirror(stage, totals)
        self._heartbeats(workers, reply.beats)
        self._controls.observe(b for b in reply.beats if b is not None)  # memory stores and MCP connections
        self._mirror_breakers()
        if reply.members is not None:
            self._join(reply.members)

    def _mirror(self, stage: StageRunner, totals: StageTotals) -> None:
        """The daemon's copy of a stage shows what every worker process did, added up: its counters set to the
        sums, its latency histogram given the samples it has not booked yet (it only grows, as everywhere)."""
        stage.degraded = totals.counter("degraded")
        stage.successes = totals.counter("successes")
        stage.fallback_served = totals.counter("fallback_served")
        stage.trips = totals.counter("trips")
        stage.handler_timeouts = totals.counter("handler_timeouts")
        if stage.memory is not None:
            stage.memory.undetected_reads = totals.counter("undetected_reads")  # the report's diagnostic
        stats = stage.stats
        stats.retries = totals.counter("retries")
        stats.breaker_opened = totals.counter("breaker_opened")
        stats.breaker_closed = totals.counter("breaker_closed")
        stats.failures.update(totals.failures)
        stage.handler_errors.update(totals.handler_errors)
        buckets, ns = self._latency_seen.get(stage.name, ({}, 0))
        gained = {i: n - buckets.get(i, 0) for i, n in totals.buckets.items() if n > buckets.get(i, 0)}
        if gained:
            stats.latency.add_counts(gained, max(0, totals.latency_ns - ns) / 1e9)
            self._latency_seen[stage.name] = ({**buckets, **totals.buckets}, max(ns, totals.latency_ns))

    def _mirror_breakers(self) -> None:
        """A stage's breaker as the daemon shows it: open while any live worker's is, else half-open while any
        worker's is, else closed (each worker walks its own route around its own open breakers)."""
        now = self._p.clock.now()
        for name, stage in self._p.stages.items():
            state: BreakerState = "closed"
            until = float("-inf")
            for states in self.breakers.values():
                seen, open_until = states.get(name, ("closed", float("-inf")))
                if seen == "open" and open_until <= now:
                    seen = "half_open"  # its time is up since that heartbeat: a trial is next
                if _WORST[seen] > _WORST[state]:
                    state = seen
                if seen == "open":
                    until = max(until, open_until)
            stage.open_until = until if state == "open" else float("-inf")
            stage._tripped = state != "closed"  # the mirror sets the state its breaker() reports (not its own)

    def _heartbeats(self, workers: list[Worker], beats: tuple[Heartbeat | None, ...]) -> None:
        busy = 0
        beating = set()
        in_flight = self._p.ledger.in_flight
        now = self._p.clock.now()
        for w, beat in zip(workers, beats, strict=True):
            agent = w.agent
            if beat is None:
                continue  # no news: keep what the last poll said
            if beat.beating:
                beating.add(agent.id)
                self.instances[agent.id] = beat.instance or ""
                self.breakers[agent.id] = {
                    stage: (state, now + left if state == "open" else float("-inf"))
                    for stage, (state, left) in beat.breakers.items()
                }
            else:
                self.breakers.pop(agent.id, None)  # a process gone: its breakers with it
            if agent.kind == "worker" and not self._rt.is_local(agent.id):
                self._rt.observe_remote(agent, beat.instance)
            elif agent.kind == "worker":
                self.stalls.observe(agent, beat)
            if beat.busy and agent.alive and not agent.paused:
                busy += 1
                held_task = in_flight.get(int(beat.busy))
                w.current = held_task if held_task is not None else Task(int(beat.busy), 0.0, False)
            else:
                w.current = None
        self.beating = beating
        self._busy.busy = busy

    def _join(self, members: Collection[str]) -> None:
        """Workers that beat without being listed yet (started on another host, or by hand) become agents."""
        p = self._p
        for agent_id in sorted(set(members) - p.agents.keys() - self._unlisted):
            if self._remote >= _MAX_REMOTE:
                self._unlisted.add(agent_id)  # it serves, and its results count; it is not an agent here
                p.events.record(p.elapsed(), "backend", state="unlisted", agent=agent_id, limit=_MAX_REMOTE)
                continue
            self._rt.adopt(agent_id)
            self._remote += 1

    async def _restore(self, client: Redis, *, lost: bool) -> bool:
        """Write back what the processes read from Redis, from the daemon's own state: every control hash and
        the stage document (the faults in force), the consumer group, the run counter (the marker that says
        Redis still holds this run) and the fencing counter's floor; when Redis lost its data, the counters
        too (added: what processes counted since the restart stays). One transaction: all of it or none."""
        keys = self._keys
        controls = self._controls
        control = controls.control_docs()
        stage_doc = controls.stages_doc()
        pipe = client.pipeline(transaction=True)
        pipe.set(keys.run, self._stream.run_id, nx=True)
        pipe.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)  # BUSYGROUP if a worker was quicker
        pipe.eval(_FENCE_FLOOR, 1, keys.fence, self._lease.highest_token)
        for agent_id, doc in control.items():
            pipe.hset(keys.control(agent_id), items=flat(doc))
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
            controls.forget()  # written again by the next pass
            self._health.unreachable(exc)
            return False
        controls.written, controls.stages_written = control, stage_doc
        self.restored += 1
        active = sum(1 for doc in control.values() if doc != DEFAULT_CONTROL)
        p = self._p
        p.events.record(p.elapsed(), "backend", state="restored", lost_data=lost, controls=len(control), faulted=active)
        return True
