"""Worker agents: take a dispatched task, walk it along the current route, hand the outcome to the sink."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from chaosd.core.clock import Clock
from chaosd.core.histogram import LogHistogram
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.stages import DEGRADED, Degraded, StageRunner
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import TaskEnd, TaskTracer
from chaosd.views import FailReason

__all__ = ["BusyMeter", "Routing", "Walk", "Worker"]

# A worker whose stages never wait (zero service time) still lets others run this often.
_YIELD_EVERY = 64


@dataclass(frozen=True, slots=True)
class Walk:
    """The route as workers walk it: the stages to run, and the optional ones skipped, which make it degraded."""

    stages: tuple[StageRunner, ...]
    bypassed: tuple[StageRunner, ...] = ()


class Routing(Protocol):
    """Where workers read the orchestrator's current route: an attribute, read once per task (None: no route)."""

    walk: Walk | None


class BusyMeter:
    """Number of busy workers and its integral over clock time (utilisation's numerator)."""

    __slots__ = ("area", "busy", "since")

    def __init__(self, t: float) -> None:
        self.busy = 0
        self.area = 0.0
        self.since = t  # when ``busy`` last changed: ``area`` holds the integral up to here

    def step(self, t: float, change: int) -> None:
        """``change`` workers became busy (1) or idle (-1) at ``t``. Workers write this out on their hot path."""
        self.area += self.busy * (t - self.since)
        self.since = t
        self.busy += change

    def area_at(self, t: float) -> float:
        return self.area + self.busy * (t - self.since)


class Worker:
    """One worker agent: serves one task at a time, start to finish, along the orchestrator's route.

    Without a dispatcher it only mirrors a worker process elsewhere (its flags, what its heartbeats report).
    """

    def __init__(
        self,
        *,
        agent: Agent,
        routing: Routing,
        queue: IngressQueue,
        ledger: Ledger,
        dispatcher: Dispatcher | None,
        clock: Clock,
        busy: BusyMeter,
        wait: LogHistogram,
        sojourn: LogHistogram,
        rng: random.Random,
    ) -> None:
        self.agent = agent
        self._routing = routing
        self._queue = queue
        self._ledger = ledger
        self._dispatcher = dispatcher
        self._clock = clock
        self._busy = busy
        self._wait = wait
        self._sojourn = sojourn
        self._rng = rng
        self.tracer: TaskTracer | None = None
        self.drop_probability = 0.0  # drop_messages: a dispatch lost on its way to this worker
        self.dropped = 0
        self.current: Task | None = None

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            # Killed (or stopped) mid-task: the task stays with the dispatch state until its lease ends.
            if self.current is not None:
                self._busy.step(self._clock.now(), -1)
                self.current = None

    async def _traced(
        self, task: Task, route: tuple[StageRunner, ...] | None, t: float
    ) -> FailReason | Degraded | None:
        """The slow path for a sampled task: the same work, with a span per stage."""
        tracer = self.tracer
        assert tracer is not None
        now = self._clock.now
        handle = tracer.started(task, self.agent.id, t)
        reason: FailReason | None = None if route is not None else "no_route"
        degraded = False
        for stage in route or ():
            begun = now()
            ran = await stage.run(self.agent.slow, task)
            tracer.stage(handle, stage.name, stage.kind, begun, now(), ran)
            if ran == DEGRADED:
                degraded = True
            elif ran is not None:
                reason = ran
                break
        outcome: TaskEnd = reason or ("lost_to_partition" if self.agent.partitioned else "completed")
        tracer.ended(handle, now(), outcome)
        return DEGRADED if reason is None and degraded else reason

    async def _loop(self) -> None:
        dispatcher = self._dispatcher
        if dispatcher is None:
            raise RuntimeError(f"{self.agent.id} stands for a process elsewhere: it has no dispatch to serve here")
        agent = self.agent
        gate = agent.gate
        queue = self._queue
        now = self._clock.now
        sleep = self._clock.sleep
        busy = self._busy
        wait_add = self._wait.add
        sojourn_add = self._sojourn.add
        ledger = self._ledger
        in_flight = ledger.in_flight
        me = agent.id
        served = 0
        # Real time: a simple stage's service ends on the model's schedule, counted from when this worker was free
        # (its previous service's due end) or the task arrived, whichever is later, so one late wake-up does not push
        # back every later service. At most ``catch_up`` of lateness is made up per task: the rest of a longer delay
        # (a stall) shows. What is measured (wait, sojourn) stays the clock's readings.
        catch_up = self._clock.catch_up
        due = float("-inf")
        while True:
            if not agent.gate_open:
                await gate.wait()
            t = now()
            task = queue.get_nowait(t)
            if task is None:
                task = await queue.get()
                t = now()
                served = 0
            elif served >= _YIELD_EVERY:
                queue.requeue(task)  # let others run; the task keeps its place at the head
                await sleep(0)
                served = 0
                continue
            # A burst: while a task ends without this worker awaiting, the next one waiting is taken at once, with
            # the clock reading that ended it. Nothing another task changes (the gate, faults, the route's flags) can
            # change in between, so only the checks that depend on the task itself are made again. Nobody else can
            # see what this worker does until it awaits either: the busy meter counts it busy from the first task to
            # the last (``holding``) and is brought up to date only when that count changes, and a task's dispatch
            # is recorded just before its first await (``unsent``), or, if it never awaits, with its acknowledgement.
            holding = False
            while True:
                if task.id not in in_flight and ledger.idempotent:
                    # A re-dispatched copy of a task that already ended: the sink would ignore it anyway.
                    ledger.deduplicated += 1
                    break
                if self.drop_probability and self._rng.random() < self.drop_probability:
                    dispatcher.assign(task, me, t)
                    self.dropped += 1  # the dispatch never arrives; the task lease will bring it back
                    break
                self.current = task
                if not task.attempts:
                    wait_add(t - task.accepted_at)
                task.attempts += 1
                if not holding:
                    # busy.step(t, 1) and, after the burst, busy.step(t, -1), written out: each saves a Python call.
                    busy.area += busy.busy * (t - busy.since)
                    busy.since = t
                    busy.busy += 1
                    holding = True
                walk = self._routing.walk
                reason: FailReason | None = None
                degraded = False  # a stage gave up and the task went on without its result
                unsent = True
                begun = t
                if task.trace is not None and self.tracer is not None:
                    unsent = False
                    dispatcher.assign(task, me, t)
                    ran = await self._traced(task, None if walk is None else walk.stages, t)
                    if catch_up:
                        due = now()  # served off the schedule: the next task's service starts from here at the earliest
                    if ran == DEGRADED:
                        degraded = True
                    else:
                        reason = ran
                elif walk is None:
                    reason = "no_route"
                else:
                    slow = agent.slow
                    if catch_up:
                        due = max(due, task.accepted_at, t - catch_up)
                    for stage in walk.stages:
                        if stage.simple:
                            service = stage.sample() * slow
                            stage.stats.latency.add(service)
                            if service > 0.0:
                                if unsent:
                                    unsent = False
                                    dispatcher.assign(task, me, t)
                                if catch_up:
                                    due += service
                                    await sleep(due - now())
                                else:
                                    await sleep(service)
                            continue
                        if unsent:
                            unsent = False
                            dispatcher.assign(task, me, t)
                        ran = await stage.run(slow, task)
                        if catch_up:
                            due = now()  # a stage that times itself: the next one starts from when it ended
                        if ran == DEGRADED:
                            degraded = True
                        elif ran is not None:
                            reason = ran
                            break
                t = now()
                self.current = None
                served += 1
                agent.served += 1
                if agent.partitioned:
                    if unsent:
                        dispatcher.assign(task, me, begun)
                    break  # the outcome cannot reach the sink; the task lease will expire
                if reason is None:
                    if walk is not None and walk.bypassed and task.id in in_flight:
                        # Completed without the skipped stages' results: degraded, like a tool given up on.
                        degraded = True
                        for skipped in walk.bypassed:
                            skipped.degraded += 1
                    if ledger.complete(task, t, degraded):  # a first outcome: its time in the system counts
                        sojourn_add(t - task.accepted_at)
                else:
                    ledger.fail(task, reason)
                if unsent:
                    dispatcher.served_at_once(task, me, begun)
                else:
                    dispatcher.ack(task.id, me)
                    break  # it awaited: back to the checks above
                if served >= _YIELD_EVERY:
                    break
                task = queue.get_nowait(t)
                if task is None:
                    break
            if holding:
                busy.area += busy.busy * (t - busy.since)
                busy.since = t
                busy.busy -= 1
