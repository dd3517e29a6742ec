"""A task's walk along the route as callbacks: each stage's service a timer on the clock, a stage that can go
wrong a :class:`~chaosd.pipeline.stage_call.StageCall`.

Both backends' workers walk their tasks with it (a Redis worker process awaits each walk's end): stages in route
order, the first failure ending it, a skipped stage degrading it; a simple stage (nothing can go wrong) served
inline, its service drawn, recorded and waited out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from chaosd.core.clock import Clock
from chaosd.pipeline.stage_call import PENDING, Pending, StageCall, StageOutcome
from chaosd.pipeline.stage_walk import Claims, Walk, WalkOutcome, WorkerFlags
from chaosd.pipeline.stages import DEGRADED, StageRunner
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import TaskEnd, TaskTracer
from chaosd.views import FailReason

__all__ = ["CallbackWalk"]

_log = math.log
# A fast walk's timer that ended a simple stage's service, not an attempt (which passes when it began).
_SERVICE = -math.inf


class CallbackWalk:
    """One worker's walks, one at a time. :meth:`start` returns True when the walk ended at once (no stage took
    time); otherwise ``done`` is called when it ends. Then ``outcome`` says how it ended, and ``waited`` whether
    it set a timer (and so claimed its task first).

    Real time: a simple stage's service ends on the model's schedule, counted from when this worker was free (its
    previous service's due end) or the task arrived, whichever is later, so one late callback does not push back
    every later service; at most ``catch_up`` of lateness is made up per task.
    """

    __slots__ = (
        "_call",
        "_catch_up",
        "_claims",
        "_clock",
        "_coalesce",
        "_done",
        "_due",
        "_fast",
        "_flags",
        "_free_at",
        "_handle",
        "_i",
        "_pending",
        "_served_in_full",
        "_slow",
        "_stage_begun",
        "_stages",
        "_task",
        "_timer",
        "_tracer",
        "_unsent",
        "_worker",
        "begun",
        "outcome",
        "route",
        "waited",
    )

    def __init__(
        self,
        clock: Clock,
        flags: WorkerFlags,
        worker: str,
        claims: Claims | None,
        done: Callable[[], object],
        *,
        coalesce: bool = False,
        served_in_full: Callable[[], object] | None = None,
    ) -> None:
        self._clock = clock
        # ``served_in_full``: called instead of ``done`` for the usual end (every stage served, none failed or
        # skipped, the last one after a timer, on a route that bypasses nothing): its owner's shorter way to it.
        self._served_in_full = served_in_full
        # ``coalesce``: a run of simple stages is served with one timer (a worker process's every wake-up is a
        # scheduling delay); a sampled task's stages keep a timer each, for their spans.
        self._coalesce = coalesce
        self._pending = 0.0
        self._flags = flags
        self._worker = worker
        self._claims = claims
        self._done = done
        self._call = StageCall(clock)
        self._catch_up = 0.0 if coalesce else clock.catch_up
        self._free_at = float("-inf")  # the previous service's due end (real time)
        self._timer: object = None
        self._task: Task | None = None
        self._stages: tuple[StageRunner, ...] = ()
        self._i = 0
        self._slow = 1.0
        self._due = 0.0
        self._fast = False  # see _walk_on
        self._unsent = True
        self._tracer: TaskTracer | None = None
        self._handle: object = None
        self._stage_begun = 0.0
        self.route: Walk | None = None
        self.begun = 0.0
        self.outcome: WalkOutcome = None
        self.waited = False

    def start(self, task: Task, route: Walk | None, t: float, tracer: TaskTracer | None) -> bool:
        """Walk ``task``, taken at ``t``, along ``route`` (None: there is none); ``tracer`` for a sampled task."""
        self.route, self.begun, self._task = route, t, task
        self.outcome = None
        self._tracer = tracer
        if tracer is not None:
            if self._claims is not None:
                self._claims.assign(task, self._worker, t)
            self._unsent = False
            self._handle = tracer.started(task, self._worker, t)
        else:
            self._unsent = True  # claimed just before the first timer: until then nobody can see it is held
        if route is None:
            self.outcome = "no_route"
            return self._ended()
        slow = self._slow = self._flags.slow
        stages = self._stages = route.stages
        catch_up = self._catch_up
        self._due = max(self._free_at, task.accepted_at, t - catch_up) if catch_up and tracer is None else 0.0
        fast = self._fast = tracer is None and not self._due and not self._coalesce
        if stages and fast:
            stage = stages[0]
            if stage.simple:
                # _step's first simple stage that takes time, written out: once per task.
                lambd = stage.exp_rate
                service = (-_log(1.0 - stage.draw()) / lambd if lambd else stage.sample()) * slow
                stage.stats.latency.add(service)
                if service > 0.0:
                    self._unsent = False
                    if self._claims is not None:
                        self._claims.assign(task, self._worker, t)
                    after = self._walk_on if len(stages) > 1 else self._last
                    self._timer = self._clock.call_at(self._clock.now() + service, after, 1, _SERVICE)
                    return False
                return self._walk_on(1)
        return self._walk_on(0) if fast else self._step(0)

    def cancel(self) -> None:
        self._pending = 0.0
        if self._timer is not None:
            self._clock.cancel(self._timer)
            self._timer = None
        self._call.cancel()

    def _go_on(self, i: int) -> bool:
        """Walk on from stage ``i`` the way this walk goes: :meth:`_walk_on` when it is fast, else :meth:`_step`."""
        return self._walk_on(i) if self._fast else self._step(i)

    def _step(self, i: int) -> bool:
        """Walk on from stage ``i``; True when the walk ended before any timer."""
        stages = self._stages
        n = len(stages)
        clock = self._clock
        while i < n:
            stage = stages[i]
            i += 1
            if self._tracer is not None:
                self._stage_begun = clock.now()
            if stage.simple:
                lambd = stage.exp_rate
                service = (-_log(1.0 - stage.draw()) / lambd if lambd else stage.sample()) * self._slow
                stage.stats.latency.add(service)
                if service > 0.0 and self._coalesce and self._tracer is None:
                    self._pending += service
                    continue
                if service > 0.0:
                    if self._unsent:
                        # _claim, written out: once per task.
                        self._unsent = False
                        if self._claims is not None:
                            self._claims.assign(self._task, self._worker, self.begun)  # type: ignore[arg-type]
                    if self._due:
                        self._due += service
                        when = self._due
                    else:
                        when = clock.now() + service
                    self._timer = clock.call_at(when, self._served, i)
                    return False
                if self._tracer is not None:
                    self._traced(stage, None)
                continue
            if self._pending:
                self._timer = self._sleep_pending(i - 1)  # then this stage, from the top
                return False
            ran = self._call_stage(stage, i)
            if ran is PENDING:
                return False
            if not self._stage_ended(stage, ran):
                break
        if self._pending:
            self._timer = self._sleep_pending(n)  # then the end
            return False
        return self._ended()

    def _walk_on(self, i: int, begun: float | None = None) -> bool:
        """:meth:`_step` of an untraced walk with no schedule of its own and nothing coalesced (``_fast``, as in
        virtual time): the same stages, draws and timers, without the checks for what such a walk never has.
        Also its timers' callback: ``begun`` is when the first attempt of stage ``i - 1`` that served the task began
        (:data:`_SERVICE` for a simple stage's service, the last one's going to :meth:`_last`)."""
        stages = self._stages
        n = len(stages)
        clock = self._clock
        timed = begun is not None
        if begun is not None:
            self._timer = None
            if begun != _SERVICE:
                stage = stages[i - 1]  # _attempted of the usual attempt
                if stage.clean:  # succeeded(), written out: once per stage call
                    stage.stats.latency.add(clock.now() - begun)
                    stage.successes += 1
                else:
                    stage.succeeded(clock.now() - begun, False)
        while i < n:
            stage = stages[i]
            i += 1
            if stage.simple:
                lambd = stage.exp_rate
                service = (-_log(1.0 - stage.draw()) / lambd if lambd else stage.sample()) * self._slow
                stage.stats.latency.add(service)
                if service > 0.0:
                    if self._unsent:
                        self._claim()
                    after = self._last if i == n else self._walk_on  # the last stage's timer ends the walk
                    self._timer = clock.call_at(clock.now() + service, after, i, _SERVICE)
                    return False
                continue
            begun = clock.now()
            mcp = stage.mcp
            if stage.plain and not (stage.has_fallback and begun < stage.open_until) and (mcp is None or mcp.connected):
                # _call_stage's attempt, written out: the service drawn, a memory read, the timeout.
                lambd = stage.exp_rate
                delay = (-_log(1.0 - stage.draw()) / lambd if lambd else stage.sample()) * self._slow
                memory = stage.memory
                if memory is not None:
                    u = stage.draw()  # drawn whatever it reads: the stream stays the same
                    if memory.corrupted:  # else every entry reads clean, at no cost
                        delay += memory.read(u, stage.cfg.restore_time)
                timeout = stage.cfg.timeout
                if delay > 0.0 and not (timeout > 0.0 and delay > timeout):
                    if self._unsent:
                        self._claim()
                    self._timer = clock.call_at(begun + delay, self._walk_on, i, begun)
                    return False
                ran = self._first_drawn(stage, i, begun, delay)
            else:
                ran = self._call_stage(stage, i)
            if ran is PENDING:
                return False
            if not self._stage_ended(stage, ran):
                break
        self._ended()
        if timed:
            self._done()
        return True

    def _last(self, i: int, begun: float) -> None:
        """A fast walk's timer for its last stage, a simple one, fired (called as :meth:`_walk_on` would be): the walk
        served its task in full."""
        self._timer = None
        self.waited = True  # it set a timer, so it claimed its task
        served = self._served_in_full
        if served is not None and self.outcome is None and not self.route.bypassed:  # type: ignore[union-attr]
            served()
        else:
            self._done()

    def _first_drawn(
        self, stage: StageRunner, i: int, begun: float, delay: float
    ) -> StageOutcome | Literal[Pending.PENDING]:
        """The rest of :meth:`_call_stage` for a first attempt drawn by :meth:`_walk_on`: timed out, or instant."""
        if self._unsent:
            self._claim()
        self._i = i
        timeout = stage.cfg.timeout
        reason: FailReason | None = None
        if timeout > 0.0 and delay > timeout:
            delay, reason = timeout, "timeout"
        if delay > 0.0:
            self._timer = self._clock.call_at(begun + delay, self._attempted, reason, begun, False)
            return PENDING
        return self._call.after_first(stage, self._slow, self._called, reason, begun, False)

    def _call_stage(self, stage: StageRunner, i: int) -> StageOutcome | Literal[Pending.PENDING]:
        """Call stage ``i - 1``, one that can go wrong: its outcome when it ended at once, else :data:`PENDING`.

        The call's first attempt is made here, the rest (books, retries) by the StageCall: the usual call is one
        attempt, a timer and its books, without the StageCall's steps around them."""
        if self._unsent:
            # _claim, written out: once per task.
            self._unsent = False
            if self._claims is not None:
                self._claims.assign(self._task, self._worker, self.begun)  # type: ignore[arg-type]
        self._i = i
        if stage.handler is not None:
            assert self._task is not None  # walking one
            return self._call.start(stage, self._slow, self._task, self._called)
        clock = self._clock
        begun = clock.now()
        use_fallback = stage.has_fallback and begun < stage.open_until  # starts_on_fallback(), written out
        # The usual attempt of a plain stage is drawn by _walk_on itself; this is the general path.
        delay, reason = stage.attempt(self._slow, stage.cfg.timeout, use_fallback)
        if delay > 0.0:
            self._timer = clock.call_at(begun + delay, self._attempted, reason, begun, use_fallback)
            return PENDING
        return self._call.after_first(stage, self._slow, self._called, reason, begun, use_fallback)

    def _sleep_pending(self, i: int) -> object:
        """One timer for the coalesced service not slept yet; the walk goes on from stage ``i`` after it."""
        if self._unsent:
            self._claim()
        pending, self._pending = self._pending, 0.0
        return self._clock.call_at(self._clock.now() + pending, self._served, i)

    def _attempted(self, reason: FailReason | None, begun: float, use_fallback: bool) -> None:
        """The first attempt of a stage call, made by :meth:`_step`, ended."""
        self._timer = None
        stage = self._stages[self._i - 1]
        if reason is None:
            stage.succeeded(self._clock.now() - begun, use_fallback)  # served: the call ends, the walk goes on
            if self._due:
                self._due = self._clock.now()
            if self._tracer is not None:
                self._traced(stage, None)
            if self._go_on(self._i):
                self._done()
            return
        called = self._call.after_first(stage, self._slow, self._called, reason, begun, use_fallback)
        if called is not PENDING:
            self._called(called)

    def _claim(self) -> None:
        self._unsent = False
        if self._claims is not None:
            assert self._task is not None  # walking one
            self._claims.assign(self._task, self._worker, self.begun)

    def _stage_ended(self, stage: StageRunner, ran: StageOutcome) -> bool:
        """Note how a stage that can go wrong ended; whether the walk goes on."""
        if self._due:
            self._due = self._clock.now()  # a stage that times itself: the next one starts from when it ended
        if self._tracer is not None:
            self._traced(stage, ran)
        if ran == DEGRADED:
            self.outcome = DEGRADED
        elif ran is not None:
            self.outcome = ran
            return False
        return True

    def _traced(self, stage: StageRunner, ran: StageOutcome) -> None:
        assert self._tracer is not None  # only for a sampled task
        self._tracer.stage(self._handle, stage.name, stage.kind, self._stage_begun, self._clock.now(), ran)

    def _served(self, i: int) -> None:
        """A timer ended: a simple stage's service (stage ``i - 1``), or the coalesced services before stage ``i``
        (or before the end); the walk goes on from stage ``i``."""
        self._timer = None
        if self._tracer is not None:
            self._traced(self._stages[i - 1], None)
        elif i == len(self._stages) and not self._due:
            # The last stage, untraced, in virtual time: what _step and _ended would do, without the two calls.
            self.waited = True  # it set a timer, so it claimed its task
            self._done()
            return
        if self._go_on(i):
            self._done()

    def _called(self, ran: StageOutcome) -> None:
        """A stage call that took time ended."""
        if self._stage_ended(self._stages[self._i - 1], ran):
            if not self._go_on(self._i):
                return  # a later stage took time
        else:
            self._ended()
        self._done()

    def _ended(self) -> bool:
        if self._tracer is not None:
            outcome = self.outcome
            ended: TaskEnd
            if outcome is not None and outcome != DEGRADED:
                ended = outcome
            else:
                ended = "lost_to_partition" if self._flags.partitioned else "completed"
            now = self._clock.now()
            self._tracer.ended(self._handle, now, ended)
            self._tracer = self._handle = None
            if self._catch_up:
                self._free_at = now  # served off the schedule: the next service starts from here at the earliest
        elif self._due:
            self._free_at = self._due
        self.waited = not self._unsent
        return True
