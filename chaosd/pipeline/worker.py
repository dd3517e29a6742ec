"""In-memory worker agents: take a dispatched task off the queue, walk it along the current route (a
:class:`~chaosd.pipeline.callback_walk.CallbackWalk`), hand the outcome to the ledger and the dispatch state."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from typing import Protocol

from chaosd.core.clock import Clock
from chaosd.core.histogram import LogHistogram
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.callback_walk import CallbackWalk
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.stage_walk import Walk, WalkOutcome
from chaosd.pipeline.stages import DEGRADED
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import TaskTracer

__all__ = ["BusyMeter", "Routing", "Walk", "Worker"]

# A worker whose stages never wait (zero service time) still lets others run this often.
_YIELD_EVERY = 64
# A lone simple stage's worker holds its task's assignment itself (see Dispatcher.holders); off: an entry per task, as
# every other path makes (the control the tests compare it with).
_HOLD = True
_log = math.log


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

    It runs as callbacks on the clock (see :mod:`chaosd.core.engine`): a stage's service is a timer, a stage that
    can go wrong a :class:`~chaosd.pipeline.stage_call.StageCall`, and waiting for work or for its gate a callback
    the queue or the agent makes. ``start`` sets it going; ``cancel`` stops it wherever it is.

    A burst: while a task ends without a timer, the next one waiting is taken at once, with the clock reading that
    ended it. Nothing another task changes (the gate, faults, the route's flags) can change in between, so only
    the checks that depend on the task itself are made again. The busy meter counts the worker busy from the first
    task of a burst to the last; a task's dispatch is recorded just before its first timer, or, if it never sets
    one, with its acknowledgement.

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
        self._now = clock.now
        self._busy = busy
        self._wait = wait
        self._sojourn = sojourn
        self._rng = rng
        self.tracer: TaskTracer | None = None
        self._walk = CallbackWalk(clock, agent, agent.id, dispatcher, self._walked, served_in_full=self._finished)
        # A lone simple stage is served without the walk (see _burst) only where the walk would not time services
        # from a schedule of its own: in virtual time, or a real clock that makes up no lateness.
        self._lone_ok = not clock.catch_up
        self.drop_probability = 0.0  # drop_messages: a dispatch lost on its way to this worker
        self.dropped = 0
        self.current: Task | None = None
        # When the current task's assignment was made, while this worker holds it itself (see Dispatcher.holders):
        # a lone simple stage's, the usual case, makes no entry in the dispatch state and acknowledges none.
        self.held_at: float | None = None
        if dispatcher is not None:
            dispatcher.holders.append(self)
        self._running = False
        self._incarnation = 0  # a task on its way to an earlier run of this worker goes back to the queue
        self._waiting = False  # on the queue's getters
        self._holding = False  # counted busy (a burst)
        self._served = 0  # tasks served since the worker last waited or let others run
        self._timer: object = None
        self._getter: Callable[[Task], object] = self._got_nothing
        self._opened: Callable[[], object] = self._got_nothing_yet

    def start(self) -> Worker:
        """Serve from now on (the agent's activity: :meth:`cancel` stops it)."""
        if self._dispatcher is None:
            raise RuntimeError(f"{self.agent.id} stands for a process elsewhere: it has no dispatch to serve here")
        self._running = True
        self._incarnation += 1
        self._getter = functools.partial(self._got, self._incarnation)
        self._opened = functools.partial(self._gate_opened, self._incarnation)
        self._served = 0
        self._take()
        return self

    def cancel(self) -> None:
        """Killed (or stopped): whatever it was doing ends here; a task in service stays with the dispatch state
        until its lease ends."""
        if not self._running:
            return
        self._running = False
        self._queue.forget(self._getter)
        self.agent.forget(self._opened)
        self._waiting = False
        if self._timer is not None:
            self._clock.cancel(self._timer)
            self._timer = None
        self._walk.cancel()
        if self._dispatcher is not None and self.current is not None:
            self._dispatcher.hand_back(self, self.current)  # in service: the dispatch state answers for it from now
        if self._holding:
            self._busy.step(self._now(), -1)
            self._holding = False
        self.current = None

    def _got_nothing(self, task: Task) -> None:
        self._queue.requeue(task)

    def _got_nothing_yet(self) -> None:
        pass

    def _gate_opened(self, incarnation: int) -> None:
        if incarnation == self._incarnation and self._running:
            self._timer = self._clock.call_at(self._now(), self._take)  # next in this instant, after the opener

    def _got(self, incarnation: int, task: Task) -> None:
        """The queue hands a task to this worker, which was waiting for one."""
        if incarnation != self._incarnation or not self._waiting:
            self._queue.requeue(task)  # meant for a run of this worker that is over: back, not astray
            return
        self._waiting = False
        self._served = 0
        if self._burst(task, self._now()):
            self._take()

    def _take(self) -> None:
        """Free: the next task waiting, or a callback when there is one (or when the gate opens)."""
        self._timer = None
        agent = self.agent
        queue = self._queue
        now = self._now
        while True:
            if not agent.gate_open:
                self._release(now())
                agent.when_open(self._opened)
                return
            t = now()
            task = queue.get_nowait(t)
            if task is None:
                if self._holding:  # _release, written out: a worker going idle
                    busy = self._busy
                    busy.area += busy.busy * (t - busy.since)
                    busy.since = t
                    busy.busy -= 1
                    self._holding = False
                self._waiting = True
                queue.wait(self._getter)
                return
            if self._served >= _YIELD_EVERY:
                self._release(t)
                queue.requeue(task)  # let others run first; the task keeps its place at the head
                self._served = 0
                self._timer = self._clock.call_at(t, self._take)
                return
            if self._holding:
                # Busy from the task before: its integral up to now, and the hold goes on (the same integral as a
                # release and a new hold in this instant, without the two).
                busy = self._busy
                busy.area += busy.busy * (t - busy.since)
                busy.since = t
            if not self._burst(task, t):
                return  # a walk goes on in callbacks: _walked takes it from there

    def _burst(self, task: Task, t: float) -> bool:
        """Serve ``task`` (taken at ``t``) and, while each ends at once, the tasks waiting after it. True when
        the worker is free again; False when a walk goes on in callbacks."""
        in_flight = self._ledger.in_flight
        walk = self._walk
        # Only the checks that depend on the task itself; a caller's attempt is checked in a call only where expired
        # attempts are dropped.
        while (
            task.id in in_flight
            and not self.drop_probability
            and (task.caller is None or not task.caller.owner.drop_expired)
        ) or not self._refused(task, t):
            self.current = task
            if not task.attempts:
                self._wait.add(t - task.accepted_at)
            task.attempts += 1
            if not self._holding:
                # busy.step(t, 1), written out: it saves a Python call per burst.
                busy = self._busy
                busy.area += busy.busy * (t - busy.since)
                busy.since = t
                busy.busy += 1
                self._holding = True
            route = self._routing.walk
            tracer = self.tracer if task.trace is not None else None
            stage = route.lone if route is not None and tracer is None and self._lone_ok else None
            if stage is not None and stage.simple:
                # walk.start's first simple stage, written out for a route of that stage alone: its timer ends in
                # _finished, with none of the walk's steps around it.
                agent = self.agent
                lambd = stage.exp_rate
                service = (-_log(1.0 - stage.draw()) / lambd if lambd else stage.sample()) * agent.slow
                stage.stats.latency.add(service)
                if service > 0.0:
                    dispatcher = self._dispatcher
                    assert dispatcher is not None  # only a worker with a dispatcher serves
                    state = dispatcher.state
                    if _HOLD and state is not None and task.id not in state:
                        self.held_at = t  # the assignment, held here: no entry made, none to undo
                    else:  # no leader (logged for the next), or an older entry for the task it replaces
                        dispatcher.assign(task, agent.id, t)
                    self._timer = self._clock.call_at(self._now() + service, self._finished)
                    return False
                walk.outcome, walk.waited = None, False  # ended at once, as the walk's would, unclaimed
            elif not walk.start(task, route, t, tracer):
                return False
            self._served += 1
            if not self._settle(task, route, walk.outcome, t, t) or self._served >= _YIELD_EVERY:
                break
            nxt = self._queue.get_nowait(t)
            if nxt is None:
                break
            task = nxt
        self._release(t)
        return True

    def _walked(self) -> None:
        """A walk that set timers ended: settle it, and the worker is free."""
        walk = self._walk
        route = walk.route
        if walk.outcome is None and walk.waited and route is not None and not route.bypassed:
            self._finished()  # the usual end, as a lone stage's: served in full after a timer
            return
        t = self._now()
        task = self.current
        assert task is not None  # a walk is of the current task
        self._served += 1
        self._settle(task, walk.route, walk.outcome, walk.begun, t)
        self._take()  # still counted busy: released there unless a task follows at once

    def _finished(self) -> None:
        """A task served in full after a timer (a lone simple stage's, or a walk's): _walked and _settle of that
        usual end, in one call."""
        self._timer = None
        t = self._now()
        task = self.current
        assert task is not None and self._dispatcher is not None  # serving one, with a dispatcher
        self.current = None
        self._served += 1
        agent = self.agent
        agent.served += 1
        if not agent.partitioned:  # cut off: the outcome cannot reach the sink, and the task lease will expire
            if self._ledger.complete(task, t):  # a first outcome: its time in the system counts
                self._sojourn.add(t - task.accepted_at)
            if self.held_at is None:
                self._dispatcher.ack(task.id, agent.id)
            else:
                self.held_at = None  # acknowledged: the assignment it held ends here
        else:  # unacknowledged: the dispatch state answers for it until its lease ends
            self._dispatcher.hand_back(self, task)
        if agent.gate_open and self._served < _YIELD_EVERY and self._holding:
            # _take's first step, written out: the next task waiting, or the wait for one. Still counted busy.
            queue = self._queue
            t = self._now()  # read again, as _take does (a real clock has moved on)
            task = queue.get_nowait(t)
            busy = self._busy
            busy.area += busy.busy * (t - busy.since)
            busy.since = t
            if task is None:
                busy.busy -= 1
                self._holding = False
                self._waiting = True
                queue.wait(self._getter)
                return
            if not self._burst(task, t):
                return  # its walk goes on in callbacks
        self._take()  # still counted busy: released there unless a task follows at once

    def _release(self, t: float) -> None:
        if self._holding:
            busy = self._busy
            busy.area += busy.busy * (t - busy.since)
            busy.since = t
            busy.busy -= 1
            self._holding = False

    def _refused(self, task: Task, t: float) -> bool:
        """Whether ``task`` is not to be served: a copy of a task that already ended, or a dispatch lost on its way."""
        ledger = self._ledger
        if task.id not in ledger.in_flight and ledger.idempotent:
            # A re-dispatched copy of a task that already ended: the sink would ignore it anyway.
            ledger.deduplicated += 1
            return True
        caller = task.caller
        if caller is not None and caller.owner.drop_expired and caller.current is not task:
            # Its caller stopped waiting (deadline propagation): dropped unserved, at no service cost.
            assert self._dispatcher is not None  # only a worker with a dispatcher serves
            ledger.fail(task, "expired")
            self._dispatcher.served_at_once(task, self.agent.id, t)
            return True
        if self.drop_probability and self._rng.random() < self.drop_probability:
            assert self._dispatcher is not None  # only a worker with a dispatcher serves
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
        waited = self._walk.waited
        dispatcher = self._dispatcher
        assert dispatcher is not None  # only a worker with a dispatcher serves
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
