"""In-memory worker agents: take a dispatched task off the queue, walk it along the current route (a
:class:`~chaosd.pipeline.stage_walk.StageWalker`), hand the outcome to the ledger and the dispatch state."""

from __future__ import annotations

import random
from typing import Protocol

from chaosd.core.clock import Clock
from chaosd.core.histogram import LogHistogram
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.stage_walk import StageWalker, Walk, WalkOutcome
from chaosd.pipeline.stages import DEGRADED
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import TaskTracer

__all__ = ["BusyMeter", "Routing", "Walk", "Worker"]

# A worker whose stages never wait (zero service time) still lets others run this often.
_YIELD_EVERY = 64


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

    A burst: while a task ends without this worker awaiting, the next one waiting is taken at once, with the clock
    reading that ended it. Nothing another task changes (the gate, faults, the route's flags) can change in between,
    so only the checks that depend on the task itself are made again. Nobody else can see what this worker does
    until it awaits either: the busy meter counts it busy from the first task to the last and is brought up to date
    only when that count changes, and a task's dispatch is recorded just before its first await, or, if it never
    awaits, with its acknowledgement.

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
        self._walker = StageWalker(clock, agent, agent.id, dispatcher)
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

    async def _loop(self) -> None:
        if self._dispatcher is None:
            raise RuntimeError(f"{self.agent.id} stands for a process elsewhere: it has no dispatch to serve here")
        agent = self.agent
        queue = self._queue
        now = self._clock.now
        busy = self._busy
        routing = self._routing
        walker = self._walker
        in_flight = self._ledger.in_flight
        wait_add = self._wait.add
        settle = self._settle
        served = 0
        while True:
            if not agent.gate_open:
                await agent.gate.wait()
            t = now()
            task = queue.get_nowait(t)
            if task is None:
                task = await queue.get()
                t = now()
                served = 0
            elif served >= _YIELD_EVERY:
                queue.requeue(task)  # let others run; the task keeps its place at the head
                await self._clock.sleep(0)
                served = 0
                continue
            holding = False  # a burst (see the class docstring): busy from its first task to its last
            # Only the checks that depend on the task itself; the rare refusals are made in a call.
            while (task.id in in_flight and not self.drop_probability) or not self._refused(task, t):
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
                walk = routing.walk
                if task.trace is not None and self.tracer is not None:
                    outcome = await walker.traced(task, walk, t, self.tracer)
                else:
                    outcome = await walker.walk(task, walk, t)
                begun, t = t, now()
                served += 1
                if not settle(task, walk, outcome, begun, t) or served >= _YIELD_EVERY:
                    break
                task = queue.get_nowait(t)
                if task is None:
                    break
            if holding:
                busy.area += busy.busy * (t - busy.since)
                busy.since = t
                busy.busy -= 1

    def _refused(self, task: Task, t: float) -> bool:
        """Whether ``task`` is not to be served: a copy of a task that already ended, or a dispatch lost on its way."""
        ledger = self._ledger
        if task.id not in ledger.in_flight and ledger.idempotent:
            # A re-dispatched copy of a task that already ended: the sink would ignore it anyway.
            ledger.deduplicated += 1
            return True
        if self.drop_probability and self._rng.random() < self.drop_probability:
            assert self._dispatcher is not None  # _loop, the only caller, serves with one
            self._dispatcher.assign(task, self.agent.id, t)
            self.dropped += 1  # the dispatch never arrives; the task lease will bring it back
            return True
        return False

    def _settle(self, task: Task, walk: Walk | None, outcome: WalkOutcome, begun: float, t: float) -> bool:
        """Hand the outcome of a walk begun at ``begun`` to the ledger and the dispatch state; whether the burst goes on
        (the walk never awaited, so nobody else ran meanwhile)."""
        self.current = None
        agent = self.agent
        agent.served += 1
        waited = self._walker.waited
        dispatcher = self._dispatcher
        assert dispatcher is not None  # _loop, the only caller, serves with one
        if agent.partitioned:
            if not waited:
                dispatcher.assign(task, agent.id, begun)
            return False  # the outcome cannot reach the sink; the task lease will expire
        ledger = self._ledger
        if outcome is None or outcome == DEGRADED:
            if walk is not None and walk.bypassed and task.id in ledger.in_flight:
                outcome = walk.count_bypassed()
            if ledger.complete(task, t, outcome is not None):  # a first outcome: its time in the system counts
                self._sojourn.add(t - task.accepted_at)
        else:
            ledger.fail(task, outcome)
        if waited:
            dispatcher.ack(task.id, agent.id)
            return False  # it awaited: back to the checks that depend on more than the task
        dispatcher.served_at_once(task, agent.id, begun)
        return True
