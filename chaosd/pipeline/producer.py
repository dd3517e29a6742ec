"""Producer agents: open-loop arrivals (poisson, constant, bursty) that follow the load shape."""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import random
from collections.abc import Callable
from typing import Literal, Protocol

from chaosd.core.clock import Clock
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.callers import Callers
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
_log = math.log


def _nothing() -> None:
    pass


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
        callers: Callers | None = None,
    ) -> None:
        self._share = share
        self._shape = shape
        self._arrival = arrival
        self._burst_p = 1.0 / burst_size  # geometric burst sizes with this mean
        self._rng = rng
        self._bursty = arrival == "bursty"
        # The arrival timer's callback: single arrivals have one of their own (_arrive), bursts the general pass.
        self._due: Callable[[], object] = self._emit_due if self._bursty else self._arrive
        self._gap = self._gap_for(arrival)
        # Poisson gaps drawn where they are used, by expovariate's own formula (the same draws, without its call).
        self._poisson = arrival == "poisson"
        self._random = rng.random
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
        self._callers = callers
        self.tracer: TaskTracer | None = None
        self._block = queue.when_full == "block"
        self._refusal: RefuseReason = "dropped" if queue.when_full == "drop" else "queue_full"
        # Run as callbacks (``start``): where the arrivals stand between two of them.
        self._next_t = 0.0
        self._rate = 0.0
        self._flat_rate, self._flat_until = 0.0, float("-inf")
        self._streak = 0
        self._left: int | None = None  # arrivals of the current burst still to emit, while one waits for room
        self._blocked: Task | None = None
        self._timer: object = None
        self._incarnation = 0
        self._opened: Callable[[], object] = _nothing
        self._room: Callable[[], object] = _nothing

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

    # --- as callbacks (in memory) ----------------------------------------------------------------------

    def start(self) -> Producer:
        """Offer tasks from now on, as callbacks (the agent's activity: :meth:`cancel` stops it). A resurrected
        producer starts afresh: it does not replay what it missed."""
        self._incarnation += 1
        self._opened = functools.partial(self._gate_opened, self._incarnation)
        self._room = functools.partial(self._room_made, self._incarnation)
        self._next_t = self._first_arrival(self._clock.now())
        self._flat_rate, self._flat_until = 0.0, float("-inf")
        self._streak = 0
        self._left = None
        self._schedule()
        return self

    def cancel(self) -> None:
        self._incarnation += 1  # a callback already on its way finds a run that is over
        if self._timer is not None:
            self._clock.cancel(self._timer)
            self._timer = None
        self.agent.forget(self._opened)
        blocked, self._blocked = self._blocked, None
        if blocked is not None:
            # Stopped holding an accepted task: admit it over capacity rather than lose it.
            self._queue.stop_waiting_for_room(self._room)
            self._queue.admit_blocked(blocked)

    def _schedule(self) -> None:
        """What comes next: the next arrival's timer, or a wait for the gate, or nothing (no load ever again)."""
        agent = self.agent
        t0 = self._t0
        while True:
            if not agent.gate_open and not agent.partitioned:
                agent.when_open(self._opened)  # paused: no arrivals until resumed, and no catch-up after
                return
            next_t = self._next_t
            if next_t - t0 >= self._flat_until:  # the shape's rate holds until then: asked again only past it
                rate, self._flat_until = self._shape.steady_until(next_t - t0)
                self._flat_rate = rate * self._share
            rate = self._flat_rate * self._surge.factor / agent.slow
            if rate > 0.0:
                break
            resumed = self._after_lull(next_t)
            if resumed is None:
                return
            self._next_t = resumed
        self._rate = rate
        t = self._clock.now()
        if next_t > t:
            self._timer = self._clock.call_at(next_t, self._due)
        elif self._streak >= _YIELD_EVERY:
            self._timer = self._clock.call_at(t, self._due)
        else:
            self._emit_due(t)

    def _gate_opened(self, incarnation: int) -> None:
        if incarnation == self._incarnation:
            self._timer = self._clock.call_at(self._clock.now(), self._resume)

    def _resume(self) -> None:
        self._timer = None
        self._next_t = max(self._next_t, self._clock.now())
        self._schedule()

    def _emit_due(self, t: float | None = None, resumed: bool = False) -> None:
        """Every arrival already due at ``t``, in one pass: what ``_schedule`` read (the gate, the surge, the
        agent's slowness) changes only between callbacks, so the rate holds for as long as the shape's does.
        ``t`` None: the arrival timer fired (the callback itself, not a call to one: once per arrival).
        ``resumed``: after a wait for room, the pass ends with the burst it was in."""
        if t is None:
            self._timer = None
            streak = 0
            t = self._clock.now()
        else:
            streak = self._streak
        agent = self.agent
        rate = self._rate
        while True:
            left = self._left
            if left is None:
                left = self._burst() if self._bursty else 1
            else:
                self._left = None
            while left:
                left -= 1
                agent.served += 1
                streak += 1
                blocked = self._emit(t)
                if blocked is not None:
                    self._streak = streak
                    self._left = left
                    self._wait_for_room(blocked)
                    return
            if self._poisson:
                next_t = self._next_t = self._next_t + -_log(1.0 - self._random()) / rate
            else:
                next_t = self._next_t = self._next_t + (1.0 / rate if self._arrival == "constant" else self._gap(rate))
            flat = next_t - self._t0 < self._flat_until  # the shape's rate still holds at next_t
            if resumed or streak >= _YIELD_EVERY or next_t > t or not flat:
                break
            t = self._clock.now()
        self._streak = streak
        if next_t > t and flat and agent.gate_open and self._flat_rate * self._surge.factor / agent.slow == rate:
            # What _schedule would decide in the usual case (the rate holds, the gate is open), without the call.
            self._timer = self._clock.call_at(next_t, self._due)
            return
        self._schedule()

    def _arrive(self) -> None:
        """A single arrival's timer fired: _emit_due's first pass, _emit's usual case written out (nothing traced)."""
        if self._left is not None:  # the rest of a burst that waited for room: the general pass
            self._emit_due()
            return
        self._timer = None
        t = self._clock.now()
        agent = self.agent
        agent.served += 1
        callers = c if (c := self._callers) is not None and c.on else None
        handing = False  # accepted for a waiting worker, handed over once the rest of this callback is done
        if self.tracer is None and not agent.partitioned and self._admission.factor >= 1.0:
            ident, measured, queue, blocked = next(self._ids), t >= self._measure_from, self._queue, None
            if queue.idle and queue.dispatching:  # the offer's hand-over to a waiting worker, made below
                handing = True
                task = Task(ident, t, measured)
                if callers is None:
                    self._ledger.admit(task)
                else:
                    self._admit_called(task, callers)
            elif callers is not None:
                blocked = self._emit_called(Task(ident, t, measured), t, callers)
            elif self._block or (depth := len(queue.queued)) < queue.limit:
                if queue.offer(task := Task(ident, t, measured), t):
                    self._ledger.admit(task)
                else:
                    blocked = self._not_offered(task)
            else:  # _not_offered's refusal, with no task made: most arrivals of an overloaded pipeline
                self._ledger.turn_away(measured, "shed" if depth < queue.capacity else self._refusal)
        else:
            blocked = self._emit(t)
        self._streak = 1
        if blocked is not None:
            self._left = 0
            self._wait_for_room(blocked)
            return
        rate = self._rate
        if self._poisson:
            next_t = self._next_t = self._next_t + -_log(1.0 - self._random()) / rate
        else:
            next_t = self._next_t = self._next_t + (1.0 / rate if self._arrival == "constant" else self._gap(rate))
        if next_t - self._t0 < self._flat_until:  # the shape's rate still holds at next_t
            if next_t > t and agent.gate_open and self._flat_rate * self._surge.factor / agent.slow == rate:
                if handing and self._clock.due_by(t):
                    handing = False
                    self._queue.hand_later(task, t)  # behind what is due in this instant, as the offer's would be
                self._timer = self._clock.call_at(next_t, self._arrive)
                if handing:
                    self._queue.hand_now(task)  # the offer's callback would run next: the worker's turn, now
                return
            if next_t <= t:
                if handing:
                    self._queue.hand_later(task, t)  # before the arrivals that follow in this instant
                self._emit_due(t)  # due already: the pass goes on
                return
        if handing:
            self._queue.hand_later(task, t)
        self._schedule()

    def _admit_called(self, task: Task, callers: Callers) -> None:
        """_emit_called's books of a first attempt the queue takes."""
        callers.arrived(task, self)
        self._ledger.admit(task)
        callers.accepted(task)

    def _wait_for_room(self, task: Task) -> None:
        queue = self._queue
        if queue.offer(task, self._clock.now()):
            self._emit_due(self._clock.now(), resumed=True)
            return
        self._blocked = task
        queue.block(task, self._room)

    def _room_made(self, incarnation: int) -> None:
        task = self._blocked
        if incarnation != self._incarnation or task is None:
            return
        queue = self._queue
        if not queue.offer(task, self._clock.now()):
            queue.wait_for_room(self._room)
            return
        self._blocked = None
        queue.unblock(task)
        self._emit_due(self._clock.now(), resumed=True)

    # --- as a coroutine (the Redis backend's producers, whose every offer awaits Redis) --------------------

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
        # _new_task, written out where nothing is traced: once per arrival.
        task = Task(next(self._ids), t, t >= self._measure_from) if self.tracer is None else self._new_task(t)
        callers = self._callers
        if callers is not None and callers.on:
            return self._emit_called(task, t, callers)
        ledger = self._ledger
        factor = self._admission.factor
        reason: RefuseReason
        # _refusal_of, written out: once per arrival.
        if self.agent.partitioned:
            reason = "partitioned"
        elif factor < 1.0 and self._throttled(factor):
            reason = "throttled"
        elif self._queue.offer(task, t):
            ledger.admit(task)
            return None
        else:
            return self._not_offered(task)
        ledger.turn_away(task.measured, reason)
        return None

    def _not_offered(self, task: Task) -> Task | None:
        """The queue did not take ``task``: refused (and counted), or accepted to wait for room (returned)."""
        reason: RefuseReason
        if self._queue.throttles():
            reason = "shed"
        elif self._block:
            self._ledger.admit(task)
            return task  # accepted: it waits for room
        else:
            reason = self._refusal
        self._ledger.turn_away(task.measured, reason)
        return None

    def _refusal_of(self, task: Task, t: float) -> RefuseReason | Literal["blocked"] | None:
        """Offer ``task`` to the queue: None when it is in, "blocked" when it is accepted to wait for room (``block``),
        else why it was refused."""
        factor = self._admission.factor
        if self.agent.partitioned:
            return "partitioned"
        if factor < 1.0 and self._throttled(factor):
            return "throttled"
        if self._queue.offer(task, t):
            return None
        if self._queue.throttles():
            return "shed"  # over admission control's limit, not a full queue: refused whatever when_full says
        if self._block:
            return "blocked"
        return self._refusal

    def _emit_called(self, task: Task, t: float, callers: Callers) -> Task | None:
        """A first attempt with a caller behind it, who times out, retries or leaves as its policy says."""
        callers.arrived(task, self)
        ledger = self._ledger
        reason = self._refusal_of(task, t)
        if reason is None or reason == "blocked":
            ledger.admit(task)
            callers.accepted(task)
            return task if reason == "blocked" else None
        ledger.turn_away(task.measured, reason)
        callers.refused(task, reason)
        return None

    def offer_retry(self, task: Task, t: float) -> RefuseReason | None:
        """A caller's retry, through this producer: None when accepted, else why it was refused. A retry never
        waits for room: under ``block`` a full queue refuses it as ``queue_full``."""
        ledger = self._ledger
        ledger.retry(task)
        reason = self._refusal_of(task, t)
        if reason is None:
            ledger.accept(task)
            return None
        refused: RefuseReason = "queue_full" if reason == "blocked" else reason
        ledger.refuse(task, refused)
        return refused
