"""Producer agents: open-loop arrivals (poisson, constant, bursty) that follow the load shape."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from typing import Protocol

from chaosd.core.clock import Clock
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.load import LoadShape
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import TaskTracer
from chaosd.views import RefuseReason

__all__ = ["Admission", "Producer"]

# Catching up on arrivals already due (a slow real clock, a zero gap) yields this often.
_YIELD_EVERY = 64
_ONCE = (None,)  # one arrival at a time, unless bursty: iterating a tuple costs less than making a range


class Admission(Protocol):
    """The share of offered tasks producers may submit (the AIMD policy's factor, 0–1; 1 for the others)."""

    factor: float


class Producer:
    """Generates its share of the offered load; arrivals never wait for completions."""

    def __init__(
        self,
        *,
        share: float,
        shape: LoadShape,
        arrival: str,
        burst_size: float,
        rng: random.Random,
        agent: Agent,
        queue: IngressQueue,
        ledger: Ledger,
        admission: Admission,
        surge: Admission,
        clock: Clock,
        ids: itertools.count[int],
        t0: float,
        measure_from: float,
        phase: float,
    ) -> None:
        self._share = share
        self._shape = shape
        self._arrival = arrival
        self._burst_p = 1.0 / burst_size  # geometric burst sizes with this mean
        self._rng = rng
        self._bursty = arrival == "bursty"
        self._gap = self._gap_for(arrival)
        self._queue = queue
        self._ledger = ledger
        self._admission = admission
        self._surge = surge  # load_spike multiplies the offered rate by surge.factor
        self.agent = agent
        self._clock = clock
        self._ids = ids
        self._t0 = t0
        self._measure_from = measure_from
        self._phase = phase  # constant arrivals: this producer's offset within one gap
        self._credit = 0.0
        self.tracer: TaskTracer | None = None
        self._block = queue.when_full == "block"
        self._refusal: RefuseReason = "dropped" if queue.when_full == "drop" else "queue_full"

    def _gap_for(self, arrival: str) -> Callable[[float], float]:
        """The draw of the time to the next arrival at a rate, chosen once: Poisson's is the generator's own method,
        with no call around it on each arrival."""
        if arrival == "constant":
            return lambda rate: 1.0 / rate
        if arrival == "bursty":
            expovariate, p = self._rng.expovariate, self._burst_p
            return lambda rate: expovariate(rate * p)
        return self._rng.expovariate

    def _burst(self) -> int:
        """A bursty arrival's size (geometric with mean ``burst_size``)."""
        n = 1
        while self._rng.random() >= self._burst_p:
            n += 1
        return n

    async def run(self) -> None:
        clock = self._clock
        now = clock.now
        sleep = clock.sleep
        shape = self._shape
        t0 = self._t0
        agent = self.agent
        gate = agent.gate
        surge = self._surge
        constant = self._arrival == "constant"  # its gap is 1/rate, divided in the loop rather than called for
        next_t = self._first_arrival(now())  # a resurrected producer starts afresh, it does not replay what it missed
        streak = 0
        share = self._share
        gap = self._gap
        bursty = self._bursty
        flat_rate, flat_until = 0.0, float("-inf")
        while True:
            if not agent.gate_open and not agent.partitioned:
                await gate.wait()  # paused: no arrivals until resumed, and no catch-up after
                next_t = max(next_t, now())
            if next_t - t0 >= flat_until:  # the shape's rate holds until flat_until: asked again only past it
                flat_rate, flat_until = shape.steady_until(next_t - t0)
                flat_rate *= share
            rate = flat_rate * surge.factor / agent.slow
            if rate <= 0.0:
                resumed = self._after_lull(next_t)
                if resumed is None:
                    await asyncio.get_running_loop().create_future()  # no load ever again
                    return
                next_t = resumed
                continue
            # One clock reading per arrival, read again only after an await (the clock reads are a tenth of a
            # task's cost in real time).
            t = now()
            if next_t > t:
                await sleep(next_t - t)
                t = now()
                streak = 0
            elif streak >= _YIELD_EVERY:
                await sleep(0)
                t = now()
                streak = 0
            # Every arrival already due, in one pass: what the checks above read (the gate, the surge, the agent's
            # slowness) changes only while this producer awaits, so the rate holds for as long as the shape's does.
            awaited = False
            while True:
                for _ in range(self._burst()) if bursty else _ONCE:
                    agent.served += 1
                    blocked = self._emit(t)
                    if blocked is not None:
                        await self._queue.put(blocked)
                        t = now()
                        awaited = True
                    streak += 1
                next_t += 1.0 / rate if constant else gap(rate)
                # Due by the last reading, it is due now: read the clock for its time. Otherwise the checks above
                # read it (one reading, as when arrivals are spaced out).
                if awaited or streak >= _YIELD_EVERY or next_t > t or next_t - t0 >= flat_until:
                    break
                t = now()

    def _first_arrival(self, start: float) -> float:
        """When the first arrival is due, starting at ``start``: constant arrivals at this producer's phase."""
        rate = self._shape.rate_at(start - self._t0) * self._share
        constant = self._arrival == "constant"
        next_t = start + (self._phase / rate if constant and rate > 0 else 0.0)
        if rate > 0 and not constant:
            next_t += self._gap(rate)
        return next_t

    def _after_lull(self, next_t: float) -> float | None:
        """No load at ``next_t``: the first arrival once the shape's rate next changes, or None if it never does."""
        nxt = self._shape.next_change(next_t - self._t0)
        if nxt is None:
            return None
        upcoming = self._shape.rate_at(nxt) * self._share
        return self._t0 + nxt + (self._gap(upcoming) if upcoming > 0.0 else 0.0)

    def _throttled(self, factor: float) -> bool:
        """Whether the throttle refuses this offer: it admits ``factor`` of them, evenly, through a running credit."""
        self._credit += factor
        if self._credit < 1.0:
            return True
        self._credit -= 1.0
        return False

    def _new_task(self, t: float) -> Task:
        """The next task, arriving at ``t``; a sampled one carries its trace from here."""
        task = Task(next(self._ids), t, t >= self._measure_from)
        tracer = self.tracer
        if tracer is not None and task.id % tracer.every == 0:
            task.trace = tracer.produced(task, self.agent.id, t)
        return task

    def _emit(self, t: float) -> Task | None:
        """Offer one task; returns it when it must wait for room (``block``), else None."""
        task = self._new_task(t)
        ledger = self._ledger
        factor = self._admission.factor
        reason: RefuseReason
        if self.agent.partitioned:
            reason = "partitioned"
        elif factor < 1.0 and self._throttled(factor):
            reason = "throttled"
        elif self._queue.offer(task, t):
            ledger.admit(task)
            return None
        elif self._queue.throttles():
            reason = "shed"  # over admission control's limit, not a full queue: refused whatever when_full says
        elif self._block:
            ledger.admit(task)
            return task  # accepted: it waits for room
        else:
            reason = self._refusal
        ledger.offer(task)
        ledger.refuse(task, reason)
        return None
