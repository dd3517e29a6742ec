"""A worker process: consumes the task stream through the consumer group and walks each task along the DAG.

The stages are the in-memory runtime's own (``Pipeline`` builds them; it is never started here). Each outcome
goes to the idempotent sink in the same round trip as the next read. Faults reach the process as a control
hash (slow, drop, pause, partition, exit) and a stage document (tool_timeout, llm_failure, jitter, removed
nodes, dependency faults, memory corruption and MCP drops); a local worker's SIGKILL and SIGSTOP come from the
daemon. Each heartbeat names the process (its ``instance``), adds the worker to the members set, so the daemon
lists workers it did not start, adds what each stage did since the last one to the sums the daemon mirrors, says
what its memory stores and MCP connections are now, and reads the stream's backlog (what a stage's pressure
reads). A sampled task's stream entry carries its producer's ``traceparent``: its spans here continue that
trace. The python stages' lifespan (their dependencies' fault proxies, setup and teardown) wraps the whole of
``run``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError
from redis.typing import EncodableT, FieldT

from chaosd.backends.redis.clock import server_offset
from chaosd.backends.redis.queue import still_cancelled
from chaosd.backends.redis.replies import (
    BUCKET_PREFIX,
    ERROR_PREFIX,
    FAIL_PREFIX,
    HEARTBEAT_S,
    LATENCY_NS,
    StageDocument,
    StageFlags,
)
from chaosd.backends.redis.scripts import COMPLETE, Keys, Sha
from chaosd.config.settings import Settings
from chaosd.core.clock import Clock
from chaosd.faults.proxy import NO_FAULTS
from chaosd.pipeline import Pipeline
from chaosd.pipeline.callback_walk import CallbackWalk
from chaosd.pipeline.resources import MemoryStore
from chaosd.pipeline.stage_walk import Walk, WalkOutcome
from chaosd.pipeline.stages import DEGRADED, StageRunner
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import CarriedTracer
from chaosd.views import FailReason

__all__ = ["RedisWorker"]

_CONTROL_EVERY = HEARTBEAT_S
_RETRY = 0.1  # seconds before trying Redis again after a connection error
_STOP_GRACE = 0.5  # seconds the serving tasks get to end once cancelled, before the stages' teardown runs
# Seconds a worker keeps the fault state it has when its control hash or the stage document is missing: Redis
# came back empty, and the daemon writes them again within a poll. A fault in force is not lifted meanwhile;
# a document still missing after this is taken as none (a daemon that is gone cleared it).
_MISSING_HOLD = 1.0


@dataclass(slots=True)
class _Outcome:
    """One finished task, waiting to reach the sink."""

    entry: str
    fields: dict[str, str]
    reason: FailReason | Literal[""]  # "" = completed
    degraded: bool
    started: float
    ended: float


@dataclass(slots=True)
class _Control:
    slow: float = 1.0
    drop: float = 0.0
    paused: bool = False
    partitioned: bool = False
    exit: str = ""  # the instance the daemon asked to exit (kill_agent on a worker it did not start)
    stages: str = ""
    # Memory and MCP stage -> the token of the last order seen. The first document read gives the orders older
    # than this process, which it does not carry out: its store and connection are fresh.
    orders: dict[str, str] = field(default_factory=dict)
    baselined: bool = False
    reported: dict[str, int] = field(default_factory=dict)
    missing: dict[str, float] = field(default_factory=dict)  # document -> since when (clock time) it is missing


@dataclass(slots=True)
class _Backlog:
    """The stream's backlog as the last heartbeat read it: entries not yet delivered (what admission bounds)."""

    capacity: int
    depth: int = 0


class RedisWorker:
    """One consumer of the group; ``run`` serves until cancelled."""

    def __init__(self, settings: Settings, agent_id: str, data: Redis, control: Redis, clock: Clock) -> None:
        self.settings = settings
        self.id = agent_id
        self.keys = Keys.of(settings.backend)
        self._data = data
        self._ctl = control
        self._clock = clock
        self._rng = random.Random(f"{settings.seed}:{agent_id}:{os.getpid()}")
        self.pipeline = Pipeline(settings, clock)  # the stages, DAG and route; never started
        self.instance = f"{os.getpid()}-{secrets.token_hex(4)}"  # this process, not the next one with the same id
        self.killed = asyncio.Event()  # set when the daemon asks this very process to exit
        self.control = _Control()
        # A run of simple stages is served with one timer: every wake-up of this process is a scheduling delay, and
        # on a busy host one per stage would cost a worker much of its rate. The stage flags reach this process by
        # heartbeat, far coarser than one walk, so deciding the run at its start changes no fault's effect.
        self._walker = CallbackWalk(clock, self.control, agent_id, None, self._walk_ended, coalesce=True)
        self._walking: asyncio.Future[None] | None = None  # the end of the walk in progress
        self._resume = asyncio.Event()
        self._resume.set()
        self._offset = 0.0
        self.current: str | None = None
        self.served = 0
        self._beats = 0  # heartbeats sent
        self.dropped = 0
        self._dropped_reported = 0
        self.round_trips = 0  # pipelines sent (serving and heartbeats): the benchmark's round trips per task
        self._trips_reported = 0
        self._shots: dict[str, npt.NDArray[np.int64]] = {}  # each stage's latency buckets as last reported
        self.backlog = _Backlog(settings.queue.capacity)
        for stage in self.pipeline.stages.values():
            stage.read_backlog(self.backlog)  # pressure reads the stream, not this process's unused queue
        self.tracer: CarriedTracer | None = None  # set when this process exports traces
        self._corrupt: list[tuple[MemoryStore, tuple[int, ...]]] = []  # orders to carry out after the next scrub

    def _redis_now(self) -> float:
        return self._clock.now() + self._offset

    async def run(self) -> None:
        """Serve until cancelled. The python stages' proxies and setup come first (a setup that raises ends the
        process with a ``ConfigError`` naming ``stages.NAME.setup``); their teardown and proxies' stop run when
        it is cancelled (SIGTERM)."""
        async with self.pipeline.lifespan():
            while True:
                try:
                    self._offset = await server_offset(self._ctl, self._clock)
                    break
                except (RedisError, OSError):  # not up yet, loading its data, or refusing us: try again
                    await self._clock.sleep(_RETRY)
            parts = [
                asyncio.create_task(self._heartbeat(), name="heartbeat"),
                asyncio.create_task(self._mcp(), name="mcp"),
                asyncio.create_task(self._serve(), name="serve"),
            ]
            try:
                await asyncio.wait(parts, return_when=asyncio.FIRST_EXCEPTION)
                for part in parts:
                    error = part.exception() if part.done() and not part.cancelled() else None
                    if error is not None:
                        raise error
            finally:
                for part in parts:
                    part.cancel()
                # Bounded, not a task group: a cancellation lost inside the Redis client (a read it retries) must
                # not keep the stages' teardown from running before the process exits.
                await asyncio.wait(parts, timeout=_STOP_GRACE)

    async def _mcp(self) -> None:
        async with asyncio.TaskGroup() as group:
            for conn in self.pipeline.mcp.values():
                group.create_task(conn.run())

    # --- serving ---------------------------------------------------------------------------------

    async def _serve(self) -> None:
        keys = self.keys
        cfg = self.settings.backend
        complete = Sha(COMPLETE)
        idempotent = "1" if self.settings.sink.idempotent else "0"
        ttl_ms = str(int(cfg.effect_ttl * 1000))
        done: list[_Outcome] = []
        block_ms = max(1, int(cfg.poll * 1000))
        while True:
            if not self._resume.is_set():
                if self.control.partitioned:
                    done.clear()  # the outcomes cannot reach the sink: their task leases will expire
                    await self._data.connection_pool.disconnect()
                await self._resume.wait()
                continue
            pipe = self._data.pipeline(transaction=False)
            if done:  # the whole last read settled in one script call
                effects: list[str] = [keys.stream, keys.results, keys.stats]
                args: list[str] = [keys.group, idempotent, ttl_ms, self.id]
                for out in done:
                    fields = out.fields
                    effects.append(keys.effect(fields["r"], fields["i"]))
                    args.append(out.entry)
                    args.append(
                        f"i {fields['i']} o {out.reason or '-'} d {'1' if out.degraded else '0'} "
                        f"a {fields['a']} s {out.started!r} e {out.ended!r} n {fields['n']} m {fields['m']}"
                    )
                complete.call(pipe, effects, args)
            pipe.xreadgroup(keys.group, self.id, {keys.stream: ">"}, count=cfg.batch, block=block_ms)
            self.round_trips += 1
            try:
                replies = await pipe.execute(raise_on_error=False)
            except (RedisError, OSError):
                still_cancelled()
                await self._clock.sleep(_RETRY)  # the outcomes are kept: the sink is idempotent, so retry them
                continue
            if Sha.missing(replies[:-1]):  # Redis lost the script before running it: settle them again
                if not await self._load(complete):
                    continue
            elif any(isinstance(r, RedisError) for r in replies[:-1]):
                await self._clock.sleep(_RETRY)
                continue
            else:
                done.clear()
            read = replies[-1]
            if isinstance(read, ResponseError) and "NOGROUP" in str(read):
                await self._create_group()  # Redis came back empty (no persistence): start the group again
                continue
            if isinstance(read, RedisError):
                await self._clock.sleep(_RETRY)
                continue
            await self._take(read, done)

    async def _take(
        self, read: list[tuple[str, list[tuple[str, dict[str, str]]]]] | None, done: list[_Outcome]
    ) -> None:
        """Serve what one read delivered, in order; each outcome joins ``done`` for the next round trip."""
        for _, entries in read or ():
            for entry, fields in entries:
                if not self._resume.is_set():
                    break  # paused or cut off mid-batch: the rest stay pending until their lease ends
                if self.control.drop and self._rng.random() < self.control.drop:
                    self.dropped += 1  # the delivery never arrives; the task lease brings it back
                    continue
                leaves = fields.get("p")  # when its caller hangs up if still queued (patience)
                if leaves is not None and fields["n"] == "0" and self._redis_now() >= float(leaves):
                    done.append(self._expired(entry, fields, "abandoned"))
                    continue
                expires = fields.get("x")  # the caller's deadline, with drop_expired
                if expires is not None and self._redis_now() >= float(expires):
                    done.append(self._expired(entry, fields, "expired"))
                    continue
                done.append(await self._walk(entry, fields))

    async def _load(self, script: Sha) -> bool:
        try:
            await script.load(self._data)
        except (RedisError, OSError):
            still_cancelled()
            await self._clock.sleep(_RETRY)
            return False
        return True

    async def _create_group(self) -> None:
        try:
            await self._data.xgroup_create(self.keys.stream, self.keys.group, id="0", mkstream=True)
        except ResponseError:
            pass  # BUSYGROUP: somebody else made it
        except (RedisError, OSError):
            still_cancelled()
            await self._clock.sleep(_RETRY)

    async def _walked(self, task: Task, walk: Walk | None, tracer: CarriedTracer | None) -> WalkOutcome:
        """The walk of ``task`` (its steps callbacks on the clock), awaited; a callback that raised fails it."""
        if not self._walker.start(task, walk, self._clock.now(), tracer):
            self._walking = asyncio.get_running_loop().create_future()
            crashed = self._clock.crashed()
            try:
                await asyncio.wait((self._walking, crashed), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not self._walking.done():
                    self._walker.cancel()  # cancelled (or crashed) mid-walk: none of its timers outlive it
                self._walking = None
            if crashed.done():
                crashed.result()
        return self._walker.outcome

    def _walk_ended(self) -> None:
        if self._walking is not None and not self._walking.done():
            self._walking.set_result(None)

    def _expired(self, entry: str, fields: dict[str, str], reason: Literal["expired", "abandoned"]) -> _Outcome:
        """A task whose caller stopped waiting before it was taken: dropped unserved, at no service cost, and failed
        as ``expired`` (its deadline, ``x``, is past: ``drop_expired``) or ``abandoned`` (its caller's patience,
        ``p``, ran out while it was queued: it left the queue, as in memory)."""
        now = self._redis_now()
        return _Outcome(entry, fields, reason, False, now, now)

    async def _walk(self, entry: str, fields: dict[str, str]) -> _Outcome:
        """The task a stream entry carries along the current route; a sampled one continues its producer's trace."""
        self.current = fields.get("i")
        started = self._redis_now()
        task = _task(fields)
        walk = self.pipeline.walk
        tracer, header = self.tracer, fields.get("t")
        if tracer is not None and header is not None:
            task.trace = tracer.continued(header)
        sampled = tracer if tracer is not None and task.trace is not None else None
        outcome = await self._walked(task, walk, sampled)
        if outcome is None or outcome == DEGRADED:
            if walk is not None and walk.bypassed:
                outcome = walk.count_bypassed()
            reason: FailReason | Literal[""] = ""
        else:
            reason = outcome
        self.current = None
        self.served += 1
        return _Outcome(entry, fields, reason, outcome == DEGRADED, started, self._redis_now())

    # --- heartbeat and control --------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        keys = self.keys
        beat = keys.heartbeat(self.id)
        ttl_ms = int(_CONTROL_EVERY * 5 * 1000)
        k = 0
        while True:
            k += 1
            self._beats += 1
            pipe = self._ctl.pipeline(transaction=False)
            pipe.hset(beat, mapping=self._beat_fields())
            pipe.pexpire(beat, ttl_ms)
            pipe.sadd(keys.members, self.id)
            deltas, shots = self._stage_deltas()
            for name, n in deltas.items():
                pipe.hincrby(keys.stage_stats, name, n)
            dropped = self.dropped - self._dropped_reported
            if dropped:
                pipe.hincrby(keys.stats, f"dropped:{self.id}", dropped)
            self.round_trips += 1
            trips = self.round_trips - self._trips_reported
            pipe.hincrby(keys.stats, f"round_trips:{self.id}", trips)
            pipe.hgetall(keys.control(self.id))
            pipe.get(keys.stage_control)
            pipe.xlen(keys.stream)
            pipe.xpending(keys.stream, keys.group)  # an error while the group is missing: the backlog stands
            try:
                replies = await pipe.execute(raise_on_error=False)
            except (RedisError, OSError):
                still_cancelled()
                await self._clock.sleep(_RETRY)
                continue
            length, pending = replies[-2:]
            replies = replies[:-2]
            if any(isinstance(r, RedisError) for r in replies):
                await self._clock.sleep(_RETRY)
                continue
            if isinstance(length, int) and isinstance(pending, dict):
                self.backlog.depth = max(0, length - int(pending.get("pending", 0)))
            for name, n in deltas.items():
                self.control.reported[name] = self.control.reported.get(name, 0) + n
            self._shots.update(shots)
            self._dropped_reported += dropped
            self._trips_reported += trips
            self._apply(replies[-2] or {}, replies[-1] or "")
            self._beat_pipeline()
            await self._clock.sleep(_CONTROL_EVERY)

    def _beat_fields(self) -> Mapping[FieldT, EncodableT]:
        """The heartbeat hash: this process, the task it serves, how many it served, its breakers and resources."""
        memory, mcp = self._resources()
        return {
            "pid": os.getpid(),
            "instance": self.instance,
            "busy": self.current or "",
            "served": self.served,
            "beat": self._beats,  # changes at each beat: a reader can tell a fresh beat from a key not yet expired
            "breakers": self._breakers(),
            "memory": memory,
            "mcp": mcp,
        }

    def _beat_pipeline(self) -> None:
        """The stages' own beat, as the leader's: breakers, reroutes and the memory scrub, then the corruption
        orders that came with the control read."""
        self.pipeline.heartbeat(self._clock.now())
        for store, entries in self._corrupt:
            # After the scrub: the entries stay corrupted until the next one, as between two leader beats,
            # for the reads to catch and the next heartbeat to report.
            store.corrupt_entries(entries)
        self._corrupt.clear()

    def _stage_deltas(self) -> tuple[dict[str, int], dict[str, npt.NDArray[np.int64]]]:
        """What each stage did since the last heartbeat that reached Redis, as ``stage_stats`` keys (only those
        that changed: the latency buckets that gained samples, not the whole histogram), and the latency
        histograms' bucket counts those deltas bring the sums to (kept once they are written)."""
        deltas: dict[str, int] = {}
        shots: dict[str, npt.NDArray[np.int64]] = {}
        reported = self.control.reported
        for name, stage in self.pipeline.stages.items():
            stats = stage.stats
            values = {
                "degraded": stage.degraded,
                "successes": stage.successes,
                "fallback_served": stage.fallback_served,
                "retries": stats.retries,
                "breaker_opened": stats.breaker_opened,
                "breaker_closed": stats.breaker_closed,
                "trips": stage.trips,
                "handler_timeouts": stage.handler_timeouts,
            }
            if stage.memory is not None:
                values["undetected_reads"] = stage.memory.undetected_reads
            for reason, n in stats.failures.items():
                values[FAIL_PREFIX + reason] = n
            for cause, n in stage.handler_errors.items():
                values[ERROR_PREFIX + cause] = n
            shot = stats.latency.snapshot()  # the same array as last time while no attempt came since
            last = self._shots.get(name)
            if shot is not last:
                gained = shot if last is None else shot - last
                for i in np.flatnonzero(gained).tolist():
                    deltas[f"{name}:{BUCKET_PREFIX}{i}"] = int(gained[i])
                values[LATENCY_NS] = round(stats.latency.sum * 1e9)  # of the whole sum: no rounding drift
                shots[name] = shot
            for counter, value in values.items():
                key = f"{name}:{counter}"
                n = value - reported.get(key, 0)
                if n:
                    deltas[key] = n
        return deltas, shots

    def _resources(self) -> tuple[str, str]:
        """The heartbeat's ``memory`` and ``mcp`` fields: each store's corrupted entries (and how many it has
        restored in all) and each connection's state now, with the last order seen (JSON; "" when the pipeline
        has no such stage)."""
        p, orders = self.pipeline, self.control.orders
        memory = {name: [orders.get(name, ""), sorted(s.corrupted), s.repaired] for name, s in p.memory.items()}
        mcp = {name: [orders.get(name, ""), c.connected] for name, c in p.mcp.items()}
        return (json.dumps(memory, sort_keys=True) if memory else "", json.dumps(mcp, sort_keys=True) if mcp else "")

    def _breakers(self) -> str:
        """The stages whose breaker is not closed, with the seconds an open one has left (JSON; "" when none)."""
        now = self._clock.now()
        states: dict[str, tuple[str, float]] = {}
        for name, stage in self.pipeline.stages.items():
            state = stage.breaker(now)
            if state != "closed":
                states[name] = (state, round(max(0.0, stage.open_until - now), 3) if state == "open" else 0.0)
        return json.dumps(states, sort_keys=True) if states else ""

    def _held(self, document: str, present: bool) -> bool:
        """Whether to keep the current state because ``document`` is missing for less than ``_MISSING_HOLD``."""
        missing = self.control.missing
        if present:
            missing.pop(document, None)
            return False
        since = missing.setdefault(document, self._clock.now())
        return self._clock.now() - since < _MISSING_HOLD

    def _apply(self, control: dict[str, str], stages: str) -> None:
        c = self.control
        hold_control = self._held("control", bool(control))
        if not self._held("stages", bool(stages)) and stages != c.stages:
            c.stages = stages
            self._apply_stages(StageDocument.from_json(stages))
        if hold_control:
            return
        c.slow = float(control.get("slow", 1.0))
        c.drop = float(control.get("drop", 0.0))
        c.paused = control.get("paused") == "1"
        c.partitioned = control.get("partitioned") == "1"
        c.exit = control.get("exit", "")
        if c.exit == self.instance:
            self.killed.set()
        if c.paused or c.partitioned:
            self._resume.clear()
        else:
            self._resume.set()

    def _apply_stages(self, doc: StageDocument) -> None:
        p = self.pipeline
        first, self.control.baselined = not self.control.baselined, True
        for name, stage in p.stages.items():
            flags = doc.flags(name)
            _set_flags(stage, flags)
            self._carry_out(stage, flags, first=first)
        p.dag.removed_nodes.clear()
        p.dag.removed_nodes.update(n for n, f in doc.stages.items() if f.removed)
        p.dag.removed_edges.clear()
        p.dag.removed_edges.update(doc.removed_edges)
        p.mark_dag_changed()

    def _carry_out(self, stage: StageRunner, flags: StageFlags, *, first: bool) -> None:
        """A corruption or drop order not seen before, unless it is older than this process (``first``)."""
        orders = self.control.orders
        if flags.corrupt is not None and stage.memory is not None:
            token, entries = flags.corrupt
            if orders.get(stage.name) != token:
                orders[stage.name] = token
                if not first:
                    self._corrupt.append((stage.memory, entries))
        if flags.mcp_drop is not None and stage.mcp is not None:
            token, outage, up = flags.mcp_drop
            if orders.get(stage.name) != token:
                orders[stage.name] = token
                if not first:
                    stage.mcp.drop(outage)  # the reconnect loop retries with backoff from now
            if up:
                stage.mcp.server_up = True  # the fault reverted: the next reconnect attempt succeeds


def _set_flags(stage: StageRunner, flags: StageFlags) -> None:
    stage.removed = flags.removed
    stage.hang = flags.hang
    timeout = flags.hang_timeout
    stage.hang_timeout = timeout if timeout is not None else float(stage.cfg.timeout or stage.hang_timeout)
    stage.llm_down = flags.llm_down
    stage.jitter = flags.jitter
    for dependency in stage.dependencies:  # the worker's proxies act on its handler's calls from now on
        faults = flags.dependencies.get(dependency, NO_FAULTS)
        if faults != stage.dependency_faults.get(dependency):
            stage.set_dependency_faults(dependency, faults)
    stage.refresh()


def _task(fields: dict[str, str]) -> Task:
    """The task a stream entry carries, as a python stage's handler sees it (its id, admission time, attempts)."""
    task = Task(int(fields["i"]), float(fields["a"]), fields.get("m") == "1")
    task.attempts = int(fields.get("n", "0"))
    return task
